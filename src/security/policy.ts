import { z } from "zod";
import { MusterError } from "../errors.js";
import { compileFilter, FilterError, parseAgentFilter, parseClassFilter, parseCompound, parseFactFilter, parseIdentityFilter, type CompiledFilter } from "../filter/index.js";
import { compileRegex } from "../filter/regex.js";
import type { AgentDDL } from "../ddl/types.js";
import type { Filter, NodeMetadata } from "../protocol/types.js";

// Action policies: who may call which action of an agent on this node. Pure: config in, a compiled
// policy out, then decisions from (caller, action, node metadata). See docs/security.md.
//
// - Policies are per agent. An agent without a policy allows every trusted caller (the behaviour
//   before policies existed); an agent with one denies what no rule allows unless `default: allow`.
// - Rules are tried in order; the first whose every condition holds decides (allow or deny).
// - Conditions: callers (exact, /regex/ unanchored as in filters, or "*"), actions (same), facts
//   ("country=de", any -F form), classes (name or /regex/), select (a -S compound). Within a list,
//   callers and actions are ORed (any entry), facts and classes ANDed (every entry), as in filters.
// - Data plugin calls (`fact('x')`, `provision().locked`) are refused in `select`: a plugin can be
//   slow or fail, a failed statement is false and `not` turns that into true, so the decision
//   would depend on more than who asks and what the node is.

export const PolicyEffect = { Allow: "allow", Deny: "deny" } as const;
export type PolicyEffect = (typeof PolicyEffect)[keyof typeof PolicyEffect];

const AGENT_NAME = /^[a-z][a-z0-9_]*$/;
const effect = z.enum([PolicyEffect.Allow, PolicyEffect.Deny]);
const nonEmptyList = z.array(z.string()).min(1, "an empty list matches nothing; leave the key out to match any");

export const PolicyRuleSchema = z
  .object({
    effect,
    /** Caller names (`user=alice`), /regex/ or "*"; any entry may match. Default: any caller. */
    callers: nonEmptyList.optional(),
    /** Action names, /regex/ or "*"; any entry may match. Default: any action. */
    actions: nonEmptyList.optional(),
    /** Fact statements as with -F; every one must hold. */
    facts: nonEmptyList.optional(),
    /** Classes as with -C; every one must be present. */
    classes: nonEmptyList.optional(),
    /** A compound expression as with -S (no data plugins). */
    select: z.string().optional(),
    /** Free text for the operator; never sent to callers. */
    description: z.string().optional(),
  })
  .strict();
export type PolicyRule = z.output<typeof PolicyRuleSchema>;

export const AgentPolicySchema = z
  .object({
    default: effect.default(PolicyEffect.Deny),
    rules: z.array(PolicyRuleSchema).default([]),
  })
  .strict()
  .superRefine((p, ctx) => {
    p.rules.forEach((rule, i) => {
      try {
        compileRule(rule);
      } catch (e) {
        if (!(e instanceof RuleError)) throw e;
        ctx.addIssue({ code: "custom", path: ["rules", i, ...e.path], message: e.message });
      }
    });
  });
export type AgentPolicy = z.output<typeof AgentPolicySchema>;

// zod builds records with a null prototype; hand callers an ordinary object.
export const PoliciesSchema = z
  .record(z.string(), AgentPolicySchema)
  .superRefine((r, ctx) => {
    for (const agent of Object.keys(r)) {
      if (!AGENT_NAME.test(agent)) ctx.addIssue({ code: "custom", path: [agent], message: "agent names are lower case letters, digits and underscores, starting with a letter" });
    }
  })
  .transform((r) => Object.fromEntries(Object.entries(r)) as Record<string, AgentPolicy>);
export type Policies = z.output<typeof PoliciesSchema>;

/** The outcome of the authorise stage. `rule` is the 1-based number of the deciding rule, 0 for the default. */
export interface Decision {
  allowed: boolean;
  rule: number;
}

interface CompiledRule {
  allow: boolean;
  caller: (caller: string) => boolean;
  action: (action: string) => boolean;
  /** Conditions on the node; undefined when the rule has none (no metadata needed). */
  node: CompiledFilter | undefined;
}

export interface CompiledAgentPolicy {
  readonly agent: string;
  readonly defaultAllow: boolean;
  readonly ruleCount: number;
  /** Decides a request. `metadata` is called at most once, and only if a rule looks at the node. */
  decide(caller: string, action: string, metadata: () => NodeMetadata): Decision;
}

/** Compiled policies by agent name. */
export type CompiledPolicies = ReadonlyMap<string, CompiledAgentPolicy>;

class RuleError extends Error {
  constructor(
    readonly path: (string | number)[],
    message: string,
  ) {
    super(message);
  }
}

function at<T>(path: (string | number)[], fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof FilterError) throw new RuleError(path, e.reason + (e.column > 0 ? ` at column ${e.column}` : ""));
    throw e;
  }
}

const anything = () => true;

/** A test of a name against entries that are exact names, /regex/ or "*"; any entry may match. */
function nameMatcher(entries: readonly string[] | undefined, key: string, parse: (text: string) => string): (name: string) => boolean {
  if (!entries) return anything;
  const exact = new Set<string>();
  const patterns: RegExp[] = [];
  for (const [i, raw] of entries.entries()) {
    if (raw.trim() === "*") return anything;
    const text = at([key, i], () => parse(raw));
    if (text.length >= 2 && text.startsWith("/") && text.endsWith("/")) patterns.push(compileRegex(text.slice(1, -1)));
    else exact.add(text);
  }
  if (patterns.length === 0) return (name) => exact.has(name);
  return (name) => exact.has(name) || patterns.some((re) => re.test(name));
}

function compileRule(rule: PolicyRule): CompiledRule {
  const filter: Filter = { fact: [], class: [], identity: [], agent: [], compound: [] };
  rule.facts?.forEach((text, i) => filter.fact.push(at(["facts", i], () => parseFactFilter(text))));
  rule.classes?.forEach((text, i) => filter.class.push(at(["classes", i], () => parseClassFilter(text))));
  if (rule.select !== undefined) {
    at(["select"], () => parseCompound(rule.select!));
    filter.compound.push(rule.select);
  }
  let node: CompiledFilter | undefined;
  if (filter.fact.length + filter.class.length + filter.compound.length > 0) {
    node = at([], () => compileFilter(filter));
    if (node.dataCalls.length > 0) {
      const names = node.dataCalls.map((c) => `${c.plugin}(${c.argument === undefined ? "" : JSON.stringify(c.argument)})`).join(", ");
      throw new RuleError(["select"], `data plugins (${names}) cannot decide a policy: use facts, classes and fact statements only`);
    }
  }
  return {
    allow: rule.effect === PolicyEffect.Allow,
    caller: nameMatcher(rule.callers, "callers", parseIdentityFilter),
    action: nameMatcher(rule.actions, "actions", parseAgentFilter),
    node,
  };
}

function compileAgentPolicy(agent: string, policy: AgentPolicy): CompiledAgentPolicy {
  const rules = policy.rules.map((rule, i) => {
    try {
      return compileRule(rule);
    } catch (e) {
      if (e instanceof RuleError) throw new MusterError("MUSTER_CONFIG_INVALID", `policies.${agent}.rules.${i}${e.path.map((p) => `.${p}`).join("")}: ${e.message}`);
      throw e;
    }
  });
  const defaultAllow = policy.default === PolicyEffect.Allow;
  return {
    agent,
    defaultAllow,
    ruleCount: rules.length,
    decide(caller, action, metadata) {
      let md: NodeMetadata | undefined;
      for (let i = 0; i < rules.length; i++) {
        const r = rules[i]!;
        if (!r.caller(caller) || !r.action(action)) continue;
        if (r.node && !r.node.matches((md ??= metadata()))) continue;
        return { allowed: r.allow, rule: i + 1 };
      }
      return { allowed: defaultAllow, rule: 0 };
    },
  };
}

/**
 * Checks (when given raw config) and compiles every agent's policy, once at start-up. Throws
 * MusterError(MUSTER_CONFIG_INVALID) naming the agent, rule and field.
 */
export function compilePolicies(policies: Record<string, unknown>, where = "policies"): CompiledPolicies {
  const parsed = PoliciesSchema.safeParse(policies);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${[where, ...i.path].join(".")}: ${i.message}`);
    throw new MusterError("MUSTER_CONFIG_INVALID", `${where} are invalid:\n${lines.join("\n")}`);
  }
  const out = new Map<string, CompiledAgentPolicy>();
  for (const [agent, policy] of Object.entries(parsed.data)) out.set(agent, compileAgentPolicy(agent, policy));
  return out;
}

/** The refusal's status message: says who may not do what, not which rules exist. */
export function denialMessage(identity: string, caller: string, agent: string, action: string, d: Decision): string {
  const why = d.rule > 0 ? `rule ${d.rule}` : "no rule allows it";
  return `denied by policy on ${identity}: ${caller} may not call ${agent}#${action} (${why})`;
}

/**
 * Likely mistakes, for start-up warnings: a policy for an agent this node does not load, a rule
 * naming an action the agent's DDL lacks.
 */
export function policyWarnings(policies: Record<string, AgentPolicy>, ddls: readonly AgentDDL[]): string[] {
  const byName = new Map(ddls.map((d) => [d.metadata.name, d]));
  const out: string[] = [];
  for (const [agent, policy] of Object.entries(policies)) {
    const ddl = byName.get(agent);
    if (!ddl) {
      out.push(`policy for agent '${agent}', which this node does not load`);
      continue;
    }
    policy.rules.forEach((rule, i) => {
      for (const a of rule.actions ?? []) {
        const name = a.trim();
        if (name === "*" || name.startsWith("/")) continue;
        if (!Object.hasOwn(ddl.actions, name)) out.push(`policies.${agent}.rules.${i}.actions names '${name}', which agent '${agent}' does not have`);
      }
    });
  }
  return out;
}
