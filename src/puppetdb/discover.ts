import { compileFilter, FilterError, pqlQueryOf, registeredData } from "../filter/index.js";
import type { Filter, NodeMetadata } from "../protocol/types.js";
import { PuppetDbRefused, type PuppetDbReader } from "./http.js";
import { factPaths, factShapesFrom, factTypesQuery, nodesQuery, pqlPlan, residualFilter, str } from "./pql.js";

// Discovery against PuppetDB: the plan of pql.ts run through a reader (http.ts, or a fake in unit
// tests), in this order:
//   1. each `pql:` identity, as the query it is: its rows' certnames;
//   2. the JSON types PuppetDB holds at the filter's fact paths (fact_paths), so numbers compare
//      as numbers in PQL wherever that is exact;
//   3. the nodes that may match and the nodes that surely match (one query when they are the same),
//      deactivated and expired nodes left out;
//   4. the nodes in between, decided by muster's own matcher on their facts (and classes) as
//      PuppetDB holds them.
// Beside it, the active nodes without the muster fact are counted: they are in no collective and
// host no agent as far as PuppetDB knows, so a warning says how many could not be selected.

export interface PuppetDbFound {
  identities: string[];
  /** What the caller should tell the user: nodes PuppetDB cannot place. */
  warnings: string[];
  /** How it was answered (for the bench and tests): queries sent, nodes checked by muster's matcher. */
  queries: number;
  checked: number;
}

/** The certname of each row of an answer (rows without one are an answer to another question). */
function certnames(rows: readonly unknown[], what: string): string[] {
  const out: string[] = [];
  for (const r of rows) {
    const c = r !== null && typeof r === "object" ? (r as { certname?: unknown }).certname : undefined;
    if (typeof c !== "string") throw new FilterError(`${what}: PuppetDB's rows carry no certname; ask for certnames, e.g. pql:inventory[certname] { facts.os.family = "Debian" }`, "", 0, "-I");
    out.push(c);
  }
  return out;
}

/** The names the muster fact lists as present ({agents: {puppet: true}, ...}). */
export function musterNames(muster: unknown, list: "agents" | "collectives"): string[] {
  const m = muster !== null && typeof muster === "object" ? (muster as Record<string, unknown>)[list] : undefined;
  return m !== null && typeof m === "object" && !Array.isArray(m) ? Object.keys(m).filter((k) => (m as Record<string, unknown>)[k] === true) : [];
}

/** Active nodes of a nodes[certname, deactivated, expired] answer. */
export function activeNodes(rows: readonly unknown[]): string[] {
  const out: string[] = [];
  for (const r of rows) {
    if (r === null || typeof r !== "object") continue;
    const { certname, deactivated, expired } = r as { certname?: unknown; deactivated?: unknown; expired?: unknown };
    // PuppetDB leaves deactivated and expired nodes out already; a row that says otherwise is dropped too
    if (typeof certname === "string" && (deactivated === null || deactivated === undefined) && (expired === null || expired === undefined)) out.push(certname);
  }
  return out;
}

/** Active nodes without the muster fact's collectives. */
export const NO_MUSTER_FACT = "nodes[count()] { !(certname in inventory[certname] { facts.muster.collectives is not null }) }";

const CHUNK = 1000;

function chunks<T>(xs: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += CHUNK) out.push(xs.slice(i, i + CHUNK));
  return out;
}

/** The nodes matching `filter` in PuppetDB, sorted. FilterError for what PuppetDB cannot answer. */
export async function discoverInPuppetDb(db: PuppetDbReader, filter: Filter, o: { collective?: string } = {}): Promise<PuppetDbFound> {
  let queries = 0;
  const ask = async (pql: string): Promise<unknown[]> => {
    queries++;
    return db.query(pql);
  };
  // 1. pql: identities
  const pql = new Map<string, string[]>();
  for (const entry of filter.identity) {
    const q = pqlQueryOf(entry);
    if (q === undefined || pql.has(q)) continue;
    try {
      pql.set(q, certnames(await ask(q), `pql:${q.slice(0, 60)}`));
    } catch (e) {
      if (e instanceof PuppetDbRefused && e.status === 400) throw new FilterError(`PuppetDB refused the pql: query: ${e.detail}`, "", 0, "-I");
      throw e;
    }
  }
  // 2. what PuppetDB holds at the filter's fact paths: types, arrays
  const paths = factPaths(filter);
  const typesQuery = factTypesQuery(paths);
  const factShapes = typesQuery ? factShapesFrom(paths, await ask(typesQuery)) : undefined;
  // 3. the bounds (a FilterError here comes before any node query)
  const plan = pqlPlan(filter, { collective: o.collective, pql, factShapes });
  const count = async (): Promise<number> => {
    const rows = await ask(NO_MUSTER_FACT);
    const n = (rows[0] as { count?: unknown } | undefined)?.count;
    return typeof n === "number" ? n : 0;
  };
  const run = async (c: typeof plan.maybe): Promise<string[]> => {
    const q = nodesQuery(c);
    return q === undefined ? [] : activeNodes(await ask(q));
  };
  // only a filter that reads the muster fact (a collective, agents) misses nodes without it
  const [maybe, sure, unplaced] = await Promise.all([run(plan.maybe), plan.exact ? Promise.resolve(undefined) : run(plan.sure), plan.facts.includes("muster") ? count() : Promise.resolve(0)]);
  const found = new Set(sure ?? maybe);
  // 4. the undecided, by muster's matcher on PuppetDB's data
  const undecided = sure ? maybe.filter((n) => !found.has(n)) : [];
  if (undecided.length) {
    const md = new Map<string, NodeMetadata>(undecided.map((n) => [n, { identity: n, facts: {}, classes: [], agents: [], collectives: [] }]));
    for (const part of chunks(undecided)) {
      const list = `[${part.map(str).join(", ")}]`;
      const [facts, classes] = await Promise.all([
        plan.facts.length ? ask(`facts[certname, name, value] { certname in ${list} and name in [${plan.facts.map(str).join(", ")}] }`) : Promise.resolve([]),
        plan.classes ? ask(`resources[certname, title] { type = "Class" and certname in ${list} }`) : Promise.resolve([]),
      ]);
      for (const row of facts) {
        const { certname, name, value } = (row ?? {}) as { certname?: unknown; name?: unknown; value?: unknown };
        const m = typeof certname === "string" ? md.get(certname) : undefined;
        if (m && typeof name === "string") m.facts[name] = value;
      }
      for (const row of classes) {
        const { certname, title } = (row ?? {}) as { certname?: unknown; title?: unknown };
        const m = typeof certname === "string" ? md.get(certname) : undefined;
        if (m && typeof title === "string") m.classes.push(title.toLowerCase());
      }
    }
    const compiled = compileFilter(residualFilter(filter));
    for (const m of md.values()) {
      m.agents = musterNames(m.facts["muster"], "agents");
      if (compiled.matches(m, registeredData(m))) found.add(m.identity);
    }
  }
  const n = unplaced;
  const warnings =
    n > 0
      ? [`${n} active node${n === 1 ? "" : "s"} in PuppetDB ${n === 1 ? "has" : "have"} no muster fact (facts.muster: agents, collectives), so ${n === 1 ? "it is" : "they are"} in no collective as far as PuppetDB knows and cannot be selected; a node reports it at its first Puppet run with the muster module on the master's modulepath (docs/puppetdb.md)`]
      : [];
  return { identities: [...found].sort(), warnings, queries, checked: undecided.length };
}
