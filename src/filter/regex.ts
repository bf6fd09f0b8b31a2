import { Lru } from "./lru.js";

// Parsing validates a regex by compiling it; matching then finds it here instead of compiling
// it again for each of thousands of emulated nodes.
const cache = new Lru<string, RegExp>(1000);

/** Compiles the body of a /regex/ (no flags; no `g`, so test() keeps no state). Throws SyntaxError. */
export function compileRegex(body: string): RegExp {
  let re = cache.get(body);
  if (re === undefined) {
    re = new RegExp(body);
    cache.set(body, re);
  }
  return re;
}
