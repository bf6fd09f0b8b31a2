/**
 * A fact by name or dotted path (`os.family`). A flat key containing dots wins over the path.
 * Only own properties count: `constructor` or `__proto__` is not a fact. (src/filter compiles the
 * same rule into its matchers.)
 */
export function lookupFact(facts: Record<string, unknown>, path: string): unknown {
  if (Object.hasOwn(facts, path)) return facts[path];
  let cur: unknown = facts;
  for (const part of path.split(".")) {
    if (cur === null || typeof cur !== "object" || !Object.hasOwn(cur, part)) return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}
