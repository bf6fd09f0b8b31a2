import { createRequire } from "node:module";

// zod (94 modules, 40-50 ms to load) loads on first use, not when a module that may need it loads:
// `muster find` with no config file to check never loads it (issue 29, npm run bench:cli). The
// ES module entry through require(esm), so it is the very instance `import "zod"` gets elsewhere
// (a daemon that also imports zod holds one copy, and schemas from both mix).
const require = createRequire(import.meta.url);

let loaded: typeof import("zod") | undefined;
function zod(): typeof import("zod") {
  return (loaded ??= require(require.resolve("zod").replace(/\.cjs$/, ".js")) as typeof import("zod"));
}

/** A schema built on its first use (then kept): `const schema = lazySchema((z) => z.object(...))`. */
export function lazySchema<T>(build: (z: typeof import("zod").z) => T): () => T {
  let schema: T | undefined;
  return () => (schema ??= build(zod().z));
}
