import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";

// Accessibility checks in the browser tests: axe-core (Deque's engine, an npm dev dependency) run on
// the page as it is, against the WCAG 2.0/2.1 A and AA rules. The page's CSP allows no injected
// script, so axe's source goes in through the devtools protocol (page.evaluate), which the CSP does
// not govern. Shared by test/web and bench/web.ts.

const AXE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"];

export interface A11yFinding {
  id: string;
  impact: string;
  help: string;
  nodes: string[];
}

/** Every WCAG A/AA violation axe finds on the page now (`tags`: other rule sets), with the elements (CSS selectors) it found it on. */
export async function axeFindings(page: Page, tags: string[] = TAGS): Promise<A11yFinding[]> {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  return page.evaluate(async (tags) => {
    const axe = (window as unknown as { axe: { run(ctx: Document, o: unknown): Promise<{ violations: { id: string; impact: string | null; help: string; nodes: { target: unknown[] }[] }[] }> } }).axe;
    const r = await axe.run(document, { runOnly: { type: "tag", values: tags }, resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact ?? "unknown", help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.map(String).join(" ")) }));
  }, tags);
}

const lines = (findings: A11yFinding[], where: string) => findings.map((f) => `${where}: ${f.impact} ${f.id} (${f.help}) at ${f.nodes.join(", ")}`);

/** Every finding, whatever its impact (what the console's browser tests fail on: axe finds nothing), as readable lines. */
export async function a11yFindings(page: Page, where: string): Promise<string[]> {
  return lines(await axeFindings(page, [...TAGS, "best-practice"]), where);
}

