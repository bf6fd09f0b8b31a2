import { checkFactFilter, compileComparison, FilterError, parseCompound, pqlQueryOf, type CompoundExpr, type FilterValue } from "../filter/index.js";
import type { FactOperator, Filter } from "../protocol/types.js";
import { pgRegex } from "./regex.js";

// muster's filters as PQL against PuppetDB's /pdb/query/v4. Pure: a Filter in, conditions on
// PuppetDB's `nodes` entity out; puppetdb/discover.ts runs them. docs/puppetdb.md says what maps
// to what.
//
// PQL cannot say everything muster's matcher says (facts compare as numbers when both sides
// parse as numbers, "12" >= 11 included; PuppetDB compares typed JSON). So every statement
// becomes two conditions, neither ever wrong:
//   sure   only nodes that match       (sure  ⊆ matching)
//   maybe  every node that matches     (maybe ⊇ matching)
// Where PQL says exactly what muster means, the two are the same; `not` swaps them. Nodes in
// maybe and not in sure are decided by muster's own matcher on the facts PuppetDB holds for them.
// Nothing is guessed, so --dm puppetdb selects what a node with PuppetDB's facts would select.
//
// Where PuppetDB knows things from:
//   -I       the certname (a `pql:` identity is a query of its own, run first: identity.ts)
//   -F, -S facts   fact_contents, by the fact's path; array facts by element
//   -C       the catalog: Class resources, titled `Apache::Mod::Ssl` for apache::mod::ssl
//   -A, -T   the `muster` fact each node's muster server keeps ({agents, collectives}; the muster
//            Puppet module's lib/facter/muster.rb): a node without it is in no collective
//   -S data plugins   fact('x').value and agent('x').present/.name, as the registry answers them;
//            any other plugin runs on the node, and is refused here (FilterError)

/** A condition on PuppetDB's nodes entity. */
export type Cond =
  | { readonly k: "true" }
  | { readonly k: "false" }
  | { readonly k: "and"; readonly cs: readonly Cond[] }
  | { readonly k: "or"; readonly cs: readonly Cond[] }
  | { readonly k: "not"; readonly c: Cond }
  | { readonly k: "pql"; readonly text: string };

const TRUE: Cond = { k: "true" };
const FALSE: Cond = { k: "false" };

export function and(...cs: Cond[]): Cond {
  const out: Cond[] = [];
  for (const c of cs) {
    if (c.k === "false") return FALSE;
    if (c.k === "true") continue;
    if (c.k === "and") out.push(...c.cs);
    else out.push(c);
  }
  return out.length === 0 ? TRUE : out.length === 1 ? out[0]! : { k: "and", cs: out };
}

export function or(...cs: Cond[]): Cond {
  const out: Cond[] = [];
  for (const c of cs) {
    if (c.k === "true") return TRUE;
    if (c.k === "false") continue;
    if (c.k === "or") out.push(...c.cs);
    else out.push(c);
  }
  return out.length === 0 ? FALSE : out.length === 1 ? out[0]! : { k: "or", cs: out };
}

export function not(c: Cond): Cond {
  if (c.k === "true") return FALSE;
  if (c.k === "false") return TRUE;
  if (c.k === "not") return c.c;
  return { k: "not", c };
}

const atom = (text: string): Cond => ({ k: "pql", text });

/** PQL text of a condition (never called with a constant inside: and/or/not fold them away). */
export function render(c: Cond): string {
  switch (c.k) {
    case "true":
    case "false":
      throw new Error(`a constant ${c.k} reached render()`);
    case "pql":
      return c.text;
    case "and":
      return c.cs.map((x) => (x.k === "or" ? `(${render(x)})` : render(x))).join(" and ");
    case "or":
      return c.cs.map((x) => (x.k === "and" ? `(${render(x)})` : render(x))).join(" or ");
    case "not":
      return `!(${render(c.c)})`;
  }
}

/** The query for the nodes a condition selects, or undefined when it selects none. */
export function nodesQuery(c: Cond): string | undefined {
  if (c.k === "false") return undefined;
  return `nodes[certname, deactivated, expired] { ${c.k === "true" ? "" : render(c)} }`.replace("{  }", "{}");
}

/** A PQL string literal. */
export function str(s: string): string {
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(s)) throw new FilterError(`a control character in ${JSON.stringify(s.slice(0, 40))} cannot be sent to PuppetDB`, "", 0);
  return `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

/** A regex matching exactly one path element (fact_contents anchors nothing itself). */
const elem = (name: string) => str(`^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
const ANY_INDEX = str("^[0-9]+$");

/** `certname in fact_contents[certname] { ... }` */
const factContents = (cond: string) => atom(`certname in fact_contents[certname] { ${cond} }`);
/** `certname in resources[certname] { type = "Class" and ... }` */
const classResource = (cond: string) => atom(`certname in resources[certname] { type = "Class" and ${cond} }`);

/** The ways a dotted path can name a value: the nested path, and a flat fact named with the dots. */
function pathVariants(path: string): string[][] {
  const segs = path.split(".");
  return segs.length > 1 ? [segs, [path]] : [segs];
}

/** The leaves at a path: the value itself, or each element of an array there. */
function leaves(path: string): string {
  const alts: string[] = [];
  for (const segs of pathVariants(path)) {
    // an array index is a number in PuppetDB's paths: regexes match either
    alts.push(segs.some((s) => /^\d+$/.test(s)) ? `path ~> [${segs.map(elem).join(", ")}]` : `path = [${segs.map(str).join(", ")}]`);
    alts.push(`path ~> [${[...segs.map(elem), ANY_INDEX].join(", ")}]`);
  }
  return `(${alts.join(" or ")})`;
}

/** The top-level facts a path reads (a flat dotted fact, or the first segment of the nested path). */
export function topFacts(path: string): string[] {
  const first = path.split(".")[0]!;
  return first === path ? [path] : [first, path];
}

/** JSON types PuppetDB reports for a fact path (fact_paths' `type`). */
export type FactType = "string" | "integer" | "float" | "boolean" | "null";

/** What fact_paths says of a path across the fleet: the types of its values, and whether any node holds an array there. */
export interface FactShape {
  types: ReadonlySet<FactType>;
  arrays: boolean;
}

/** A pair of conditions: sure ⊆ matching ⊆ maybe. */
export interface Bounds {
  readonly sure: Cond;
  readonly maybe: Cond;
}
const exact = (c: Cond): Bounds => ({ sure: c, maybe: c });

const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
// a string PuppetDB holds that muster would read as a number
const NUMERIC_STRING = str("^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$");

/** A number as a PQL literal, when PQL can write it exactly. */
function pqlNumber(n: number): string | undefined {
  const s = String(n);
  return /^-?\d+(\.\d+)?$/.test(s) ? s : undefined;
}

export interface TranslateOptions {
  /** The collective the nodes must be in (the client's -T, else its configured one). */
  collective?: string;
  /** The certnames each `pql:` identity returned, by its query text (puppetdb/discover.ts runs them first). */
  pql?: ReadonlyMap<string, readonly string[]>;
  /** What PuppetDB holds at each fact path the filter reads (fact_paths); a path missing here may hold anything. */
  factShapes?: ReadonlyMap<string, FactShape>;
}

interface Ctx extends TranslateOptions {
  facts: Set<string>;
  classes: boolean;
}

/** `certname in inventory[certname] { ... }`: a lookup in each node's facts, far quicker than fact_contents. */
const inventory = (cond: string) => atom(`certname in inventory[certname] { ${cond} }`);

/** A dotted path as inventory spells it (quoted segments: a flat name with dots is one segment). */
const inventoryField = (segs: readonly string[]) => `facts.${segs.map((s) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? s : str(s))).join(".")}`;

/**
 * The path's scalar value compared in inventory, with an array's elements in fact_contents where
 * fact_paths says a node holds an array there. A path with an index segment (disks.0.name) stays in
 * fact_contents, which reads indexes and keys alike.
 */
function scalarOrElements(path: string, shape: FactShape | undefined, cmp: (field: string) => string, elements: string): Cond {
  const variants = pathVariants(path);
  if (variants.some((segs) => segs.some((seg) => /^\d+$/.test(seg)))) return factContents(`${leaves(path)} and ${elements}`);
  const scalar = or(...variants.map((segs) => inventory(cmp(inventoryField(segs)))));
  if (shape && !shape.arrays) return scalar;
  const items = variants.map((segs) => `path ~> [${[...segs.map(elem), ANY_INDEX].join(", ")}]`);
  return or(scalar, factContents(`(${items.join(" or ")}) and ${elements}`));
}

/** A fact statement as bounds: `path OP value`, the rules of src/filter/match.ts. */
function factBounds(ctx: Ctx, path: string, operator: FactOperator, value: FilterValue): Bounds {
  for (const f of topFacts(path)) ctx.facts.add(f);
  const onLeaves = (cond: string) => factContents(`${leaves(path)} and ${cond}`);
  const shape = ctx.factShapes?.get(path);
  if (operator === "!=") {
    // present, and no leaf equal: a missing fact never matches, != included
    const eq = factBounds(ctx, path, "==", value);
    const presentSure = factContents(leaves(path));
    const presentMaybe = atom(`certname in facts[certname] { name in [${topFacts(path).map(str).join(", ")}] }`);
    return { sure: and(presentSure, not(eq.maybe)), maybe: and(presentMaybe, not(eq.sure)) };
  }
  // inventory's regex reads a structure as its JSON text, which muster counts as missing: leaves only
  if (value.kind === "regex") return exact(onLeaves(`value ~ ${str(pgRegex(value.source))}`));
  const text = value.text;
  const num = NUMBER.test(text) ? Number(text) : undefined;
  const n = num !== undefined && Number.isFinite(num) ? num : undefined;
  const types = shape?.types;
  const anyLeaf = factContents(leaves(path));
  const hasStrings = !types || types.has("string");
  const onlyNumbers = types !== undefined && [...types].every((t) => t === "integer" || t === "float");
  if (operator === "==" || operator === "=~") {
    if (n === undefined) {
      // a string compares as a string; booleans by their string form (equality on a structure is false, as for muster)
      const bool = text === "true" || text === "false" ? [text] : [];
      return exact(scalarOrElements(path, shape, (f) => (bool.length ? `(${f} = ${str(text)} or ${f} = ${bool[0]})` : `${f} = ${str(text)}`), bool.length ? `(value = ${str(text)} or value = ${bool[0]})` : `value = ${str(text)}`));
    }
    const lit = pqlNumber(n);
    if (lit === undefined) return { sure: scalarOrElements(path, shape, (f) => `${f} = ${str(text)}`, `value = ${str(text)}`), maybe: anyLeaf };
    const sure = scalarOrElements(path, shape, (f) => `(${f} = ${lit} or ${f} = ${str(text)})`, `(value = ${lit} or value = ${str(text)})`);
    // "08", "8.0" and "+8" equal 8 for muster: strings that read as numbers are checked on their value
    return hasStrings ? { sure, maybe: onLeaves(`(value = ${lit} or value ~ ${NUMERIC_STRING})`) } : exact(sure);
  }
  // <, >, <=, >=: numbers when both sides are numbers, else strings (which PQL cannot order).
  // fact_contents compares numbers with numbers only (inventory orders a structure above any number)
  const lit = n === undefined ? undefined : pqlNumber(n);
  if (lit === undefined) return { sure: FALSE, maybe: anyLeaf };
  const sure = onLeaves(`value ${operator} ${lit}`);
  return onlyNumbers ? exact(sure) : { sure, maybe: anyLeaf };
}

/** A Puppet class's resource title: every segment capitalised (apache::mod::ssl -> Apache::Mod::Ssl). */
export function classTitle(name: string): string {
  return name
    .split("::")
    .map((s) => (s ? s[0]!.toUpperCase() + s.slice(1) : s))
    .join("::");
}

const CLASS_NAME = /^[a-z0-9_]+(::[a-z0-9_]+)*$/;

function classBounds(ctx: Ctx, value: FilterValue): Bounds {
  ctx.classes = true;
  if (value.kind === "literal") {
    // Puppet's class names are lower case: any other name is no class a catalog holds
    return exact(CLASS_NAME.test(value.text) ? classResource(`title = ${str(classTitle(value.text))}`) : FALSE);
  }
  // Titles are capitalised; a regex without capitals matches a lower-case name exactly when it
  // matches the title ignoring case. One with capitals may match less on the name: checked after.
  const cond = classResource(`title ~ ${str(`(?i)${pgRegex(value.source)}`)}`);
  return /[A-Z]/.test(value.source) ? { sure: FALSE, maybe: cond } : exact(cond);
}

/**
 * The `muster` fact naming an agent or a collective: `{agents: {puppet: true, ...}, collectives:
 * {muster: true}}`, maps so that a name is a lookup in inventory; a regex reads the names in fact_contents.
 */
function musterListBounds(ctx: Ctx, list: "agents" | "collectives", entry: FilterValue): Bounds {
  ctx.facts.add("muster");
  if (entry.kind === "regex") return exact(factContents(`path ~> [${elem("muster")}, ${elem(list)}, ${str(pgRegex(entry.source))}] and value = true`));
  return exact(inventory(`${inventoryField(["muster", list, entry.text])} = true`));
}

const asValue = (entry: string): FilterValue =>
  entry.length >= 2 && entry.startsWith("/") && entry.endsWith("/") ? { kind: "regex", source: entry.slice(1, -1) } : { kind: "literal", text: entry };

function refuse(plugin: string, field: string): FilterError {
  const why =
    plugin === "agent"
      ? `PuppetDB answers agent().present and agent().name only (from the muster fact), not agent().${field}`
      : `the data plugin ${plugin}() runs on the node, and PuppetDB holds facts, classes and reports only`;
  return new FilterError(`${why}; use broadcast discovery (--dm broadcast) for this filter`, "", 0, "-S");
}

function compoundBounds(ctx: Ctx, e: CompoundExpr): Bounds {
  switch (e.kind) {
    case "and": {
      const bs = e.operands.map((x) => compoundBounds(ctx, x));
      return { sure: and(...bs.map((b) => b.sure)), maybe: and(...bs.map((b) => b.maybe)) };
    }
    case "or": {
      const bs = e.operands.map((x) => compoundBounds(ctx, x));
      return { sure: or(...bs.map((b) => b.sure)), maybe: or(...bs.map((b) => b.maybe)) };
    }
    case "not": {
      const b = compoundBounds(ctx, e.operand);
      return { sure: not(b.maybe), maybe: not(b.sure) };
    }
    case "fact":
      return factBounds(ctx, e.fact, e.operator, e.value);
    case "class":
      return classBounds(ctx, e.value);
    case "data": {
      const head = e.field.split(".")[0];
      if (e.plugin === "fact" && head === "value") {
        // fact('os').value.family reads os.family; without an argument the plugin answers nothing
        if (!e.argument) return exact(FALSE);
        const rest = e.field.slice("value".length);
        return factBounds(ctx, `${e.argument}${rest}`, e.operator, e.value);
      }
      if (e.plugin === "agent" && (e.field === "present" || e.field === "name")) {
        if (!e.argument) return exact(FALSE);
        const test = compileComparison(e.operator, e.value);
        if (e.field === "name") return exact(test(e.argument) ? TRUE : FALSE);
        const has = musterListBounds(ctx, "agents", { kind: "literal", text: e.argument }).sure;
        const [t, f] = [test(true), test(false)];
        return exact(t && f ? TRUE : t ? has : f ? not(has) : FALSE);
      }
      throw refuse(e.plugin, e.field);
    }
  }
}

export interface PqlPlan {
  /** Nodes that match, for certain. */
  sure: Cond;
  /** Every node that matches (and perhaps others). */
  maybe: Cond;
  /** sure and maybe are the same: no node needs checking afterwards. */
  exact: boolean;
  /** Top-level facts (and whether classes) muster's matcher needs to decide a node in maybe and not in sure. */
  facts: string[];
  classes: boolean;
}

const labelled = <T>(context: string, fn: () => T): T => {
  try {
    return fn();
  } catch (e) {
    throw e instanceof FilterError ? e.withContext(context) : e;
  }
};

/**
 * The conditions for a filter. Throws a FilterError, before anything is asked of PuppetDB, for
 * what PuppetDB cannot answer faithfully: data plugins that run on the node, regexes PostgreSQL
 * would read differently. `pql:` identities must have been run (opts.pql) before.
 */
export function pqlPlan(filter: Filter, opts: TranslateOptions = {}): PqlPlan {
  const ctx: Ctx = { ...opts, facts: new Set(), classes: false };
  const parts: Bounds[] = [];
  if (filter.identity.length) {
    const ids = filter.identity.map((entry, i) =>
      labelled(`-I[${i}]`, (): Cond => {
        const query = pqlQueryOf(entry);
        if (query !== undefined) {
          const found = opts.pql?.get(query);
          if (!found) throw new Error(`the pql: identity ${JSON.stringify(entry.slice(0, 60))} was not run first`);
          return found.length ? atom(`certname in [${found.map(str).join(", ")}]`) : FALSE;
        }
        const v = asValue(entry);
        return atom(v.kind === "regex" ? `certname ~ ${str(pgRegex(v.source))}` : `certname = ${str(v.text)}`);
      }),
    );
    parts.push(exact(or(...ids))); // identities are ORed
  }
  if (opts.collective !== undefined) parts.push(musterListBounds(ctx, "collectives", { kind: "literal", text: opts.collective }));
  filter.agent.forEach((a, i) => parts.push(labelled(`-A[${i}]`, () => musterListBounds(ctx, "agents", asValue(a)))));
  filter.class.forEach((c, i) => parts.push(labelled(`-C[${i}]`, () => classBounds(ctx, asValue(c)))));
  filter.fact.forEach((f, i) =>
    parts.push(
      labelled(`-F[${i}]`, () => {
        const s = checkFactFilter(f);
        return factBounds(ctx, s.fact, s.operator, s.value);
      }),
    ),
  );
  filter.compound.forEach((src, i) => parts.push(labelled(`-S[${i}]`, () => compoundBounds(ctx, parseCompound(src)))));
  const sure = and(...parts.map((p) => p.sure));
  const maybe = and(...parts.map((p) => p.maybe));
  return { sure, maybe, exact: JSON.stringify(sure) === JSON.stringify(maybe), facts: [...ctx.facts].sort(), classes: ctx.classes };
}

/**
 * Throws the FilterError pqlPlan would, without PuppetDB: what a client checks before it sends
 * anything (data plugins that run on the node, regexes PostgreSQL reads differently).
 */
export function checkPuppetDbFilter(filter: Filter): void {
  const pql = new Map(filter.identity.flatMap((i) => (pqlQueryOf(i) === undefined ? [] : [[pqlQueryOf(i)!, [] as string[]] as const])));
  pqlPlan(filter, { pql });
}

/** Every fact path the filter reads (fact_paths is asked what PuppetDB holds there first). */
export function factPaths(filter: Filter): string[] {
  const out = new Set<string>();
  const walk = (e: CompoundExpr): void => {
    if (e.kind === "and" || e.kind === "or") e.operands.forEach(walk);
    else if (e.kind === "not") walk(e.operand);
    else if (e.kind === "fact") out.add(e.fact);
    else if (e.kind === "data" && e.plugin === "fact" && e.argument && e.field.split(".")[0] === "value") out.add(`${e.argument}${e.field.slice(5)}`);
  };
  for (const f of filter.fact) out.add(f.fact);
  for (const src of filter.compound) walk(parseCompound(src));
  return [...out].sort();
}

/** fact_paths' query for the types PuppetDB holds at these paths (its own regexes are anchored). */
export function factTypesQuery(paths: readonly string[]): string | undefined {
  if (!paths.length) return undefined;
  const bare = (name: string) => str(name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const alts: string[] = [];
  for (const p of paths) {
    for (const segs of pathVariants(p)) {
      alts.push(`path ~> [${segs.map(bare).join(", ")}]`, `path ~> [${[...segs.map(bare), str("[0-9]+")].join(", ")}]`);
    }
  }
  return `fact_paths[path, type] { ${alts.join(" or ")} }`;
}

/** fact_paths rows -> what each muster path holds (an array's elements count for their array's path). */
export function factShapesFrom(paths: readonly string[], rows: readonly unknown[]): Map<string, FactShape> {
  const out = new Map(paths.map((p) => [p, { types: new Set<FactType>(), arrays: false }]));
  for (const row of rows) {
    if (row === null || typeof row !== "object") continue;
    const { path, type } = row as { path?: unknown; type?: unknown };
    if (!Array.isArray(path) || typeof type !== "string") continue;
    const segs = path.map(String);
    for (const p of paths) {
      const variants = pathVariants(p);
      const element = variants.some((v) => segs.length === v.length + 1 && /^\d+$/.test(segs.at(-1)!) && sameSegs(v, segs.slice(0, -1)));
      if (!element && !variants.some((v) => sameSegs(v, segs))) continue;
      const shape = out.get(p)!;
      if (element) shape.arrays = true;
      // a type we do not know is taken as a string: checked by muster's matcher
      shape.types.add((["string", "integer", "float", "boolean", "null"].includes(type) ? type : "string") as FactType);
    }
  }
  return out;
}

const sameSegs = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** The filter muster's matcher applies to an undecided node: identities were decided by PuppetDB exactly. */
export function residualFilter(filter: Filter): Filter {
  return { ...filter, identity: [] };
}
