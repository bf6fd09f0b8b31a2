import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import fastifyStatic from "@fastify/static";
import type { FastifyInstance } from "fastify";

// The console's assets (HTML, JS modules, CSS), shipped in the package under src/web/assets and
// read at run time: dist/src/web/static.js -> ../../../src/web/assets. Nothing is fetched from a
// CDN. (A first stub by h-webapi; the browser side owns this file.)

export const ASSETS_DIR = fileURLToPath(new URL("../../../src/web/assets/", import.meta.url));

export async function registerStatic(app: FastifyInstance): Promise<void> {
  if (!existsSync(ASSETS_DIR)) throw new Error(`the console's assets are missing: ${ASSETS_DIR} (reinstall muster)`);
  await app.register(fastifyStatic, { root: ASSETS_DIR, prefix: "/assets/", index: false, wildcard: true });
}
