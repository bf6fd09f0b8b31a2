import { existsSync } from "node:fs";
import { chromium, type Browser, type Page } from "playwright-core";

// Headless Chromium from Debian's `chromium` package, driven by playwright-core (which never
// downloads a browser). Shared by test/web and bench/web.ts.

export const CHROMIUM = process.env.MUSTER_CHROMIUM ?? "/usr/bin/chromium";

/** Flags that keep Chromium off the network: no sync, updates, field trials or QUIC probes. */
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-default-browser-check"];

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (scripts/setup.sh does), or set MUSTER_CHROMIUM`);
  return chromium.launch({ executablePath: CHROMIUM, args: ARGS, timeout: 30_000 });
}

/**
 * Collects Content-Security-Policy violations (inline script or style, an off-origin load) and
 * uncaught errors the page reports: a console page must cause none.
 */
export function watchPageProblems(page: Page, violations: string[] = []): string[] {
  page.on("console", (m) => {
    if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
  });
  page.on("pageerror", (e) => violations.push(`page error: ${e.message}`));
  page.on("response", (r) => {
    if (r.status() === 404) violations.push(`404: ${r.url()}`);
  });
  return violations;
}
