import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import fastifyStatic from "@fastify/static";
import type { FastifyInstance } from "fastify";

// The console's assets (HTML, JS modules, CSS), shipped in the package under src/web/assets and
// read at run time: dist/src/web/static.js -> ../../../src/web/assets. The one view library,
// lit-html, is served from its installed package directory (a dependency of muster), so nothing is
// fetched from a CDN and there is no build step: the browser loads plain ES modules.

export const ASSETS_DIR = fileURLToPath(new URL("../../../src/web/assets/", import.meta.url));

/** URL prefixes of what this plugin serves (the server's auth hook may let them through unauthenticated: they hold no data). */
export const STATIC_PREFIXES = ["/assets/", "/vendor/"] as const;

/** Browser libraries served under /vendor/<name>/, each from its package directory. */
const VENDORED = ["lit-html"] as const;

/** The package's root directory: walks up from its entry point to the package.json naming it (its exports hide package.json). */
export function packageDir(name: string): string {
  const entry = createRequire(import.meta.url).resolve(name);
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    const pj = join(dir, "package.json");
    if (existsSync(pj) && (JSON.parse(readFileSync(pj, "utf8")) as { name?: string }).name === name) return dir;
  }
  throw new Error(`cannot find the package directory of ${name} (reinstall muster)`);
}

export async function registerStatic(app: FastifyInstance): Promise<void> {
  if (!existsSync(join(ASSETS_DIR, "index.html"))) throw new Error(`the console's assets are missing: ${ASSETS_DIR} (reinstall muster)`);
  await app.register(fastifyStatic, { root: ASSETS_DIR, prefix: "/assets/", index: false, wildcard: true });
  for (const name of VENDORED) {
    // Only the ES modules a browser needs; source maps and type declarations stay private.
    await app.register(fastifyStatic, {
      root: packageDir(name),
      prefix: `/vendor/${name}/`,
      index: false,
      decorateReply: false,
      wildcard: true,
      allowedPath: (path) => path.endsWith(".js") && !path.startsWith("/node/") && !path.startsWith("/development/"),
    });
  }
}

/** The HTML of a page in the assets (the app shell or the login page), for the server's routes for / and /login. */
export function pageHtml(page: "index" | "login"): string {
  return readFileSync(join(ASSETS_DIR, `${page}.html`), "utf8");
}
