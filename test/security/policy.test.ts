import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../../src/errors.js";
import type { NodeMetadata } from "../../src/protocol/types.js";
import { mergePolicies, readPolicyDir } from "../../src/config/policy-files.js";
import { compilePolicies, denialMessage, policyWarnings, type CompiledAgentPolicy } from "../../src/security/policy.js";
import { ServerConfigSchema } from "../../src/server/config.js";
import { rpcutilDDL } from "../../src/agents/rpcutil/ddl.js";
import { tempDir } from "../support/collective.js";

// Action policies, evaluated without a network: every condition alone, together, first match,
// defaults, and every way a policy can be malformed.

const node: NodeMetadata = {
  identity: "web1.example.net",
  facts: { country: "de", os: { family: "Debian" }, cores: 8, roles: ["web", "cache"] },
  classes: ["apache", "apache::mod::ssl", "base"],
  agents: ["rpcutil", "puppet"],
  collectives: ["muster"],
};

function policy(p: unknown, agent = "puppet"): CompiledAgentPolicy {
  const compiled = compilePolicies({ [agent]: p });
  return compiled.get(agent)!;
}

function allowed(p: CompiledAgentPolicy, caller: string, action: string, md: NodeMetadata = node): boolean {
  return p.decide(caller, action, () => md).allowed;
}

test("callers: exact names, /regex/ (unanchored, as in filters), * and lists where any entry may match", () => {
  const exact = policy({ rules: [{ effect: "allow", callers: ["user=alice"] }] });
  assert.equal(allowed(exact, "user=alice", "runonce"), true);
  assert.equal(allowed(exact, "user=alice2", "runonce"), false);
  assert.equal(allowed(exact, "user=bob", "runonce"), false);

  const re = policy({ rules: [{ effect: "allow", callers: ["/^user=(alice|bob)$/"] }] });
  assert.equal(allowed(re, "user=bob", "x"), true);
  assert.equal(allowed(re, "user=bobby", "x"), false);
  const loose = policy({ rules: [{ effect: "allow", callers: ["/alice/"] }] });
  assert.equal(allowed(loose, "user=malice", "x"), true, "unanchored like filter regexes: anchor with ^ $");

  const any = policy({ rules: [{ effect: "allow", callers: ["*"] }] });
  assert.equal(allowed(any, "user=anyone", "x"), true);
  const list = policy({ rules: [{ effect: "allow", callers: ["user=carol", "/^svc=/"] }] });
  assert.equal(allowed(list, "user=carol", "x"), true);
  assert.equal(allowed(list, "svc=provisioner", "x"), true);
  assert.equal(allowed(list, "user=dave", "x"), false);
});

test("actions: exact names, /regex/ and *", () => {
  const p = policy({ rules: [{ effect: "allow", actions: ["status", "/^last_/"] }] });
  assert.equal(allowed(p, "user=alice", "status"), true);
  assert.equal(allowed(p, "user=alice", "last_run"), true);
  assert.equal(allowed(p, "user=alice", "runonce"), false);
  assert.equal(allowed(policy({ rules: [{ effect: "allow", actions: ["*"] }] }), "u", "anything"), true);
});

test("facts: every statement must hold, with the -F operators, dotted paths and array facts", () => {
  const p = policy({ rules: [{ effect: "allow", facts: ["country=de", "os.family=~/^deb/i".replace("/i", "/"), "cores>=4"] }] });
  assert.equal(allowed(p, "u", "a"), false, "case-sensitive regex: Debian does not match ^deb");
  const q = policy({ rules: [{ effect: "allow", facts: ["country=de", "os.family=~/^Deb/", "cores>=4", "roles=cache"] }] });
  assert.equal(allowed(q, "u", "a"), true);
  assert.equal(allowed(q, "u", "a", { ...node, facts: { ...node.facts, cores: 2 } }), false);
  assert.equal(allowed(q, "u", "a", { ...node, facts: { country: "fr" } }), false);
  const missing = policy({ rules: [{ effect: "allow", facts: ["datacenter!=ams"] }] });
  assert.equal(allowed(missing, "u", "a"), false, "a missing fact matches no operator, != included");
});

test("classes: every class must be present; names or /regex/", () => {
  assert.equal(allowed(policy({ rules: [{ effect: "allow", classes: ["apache", "base"] }] }), "u", "a"), true);
  assert.equal(allowed(policy({ rules: [{ effect: "allow", classes: ["apache", "mysql"] }] }), "u", "a"), false);
  assert.equal(allowed(policy({ rules: [{ effect: "allow", classes: ["/::mod::ssl$/"] }] }), "u", "a"), true);
});

test("select: a compound expression over facts and classes", () => {
  const p = policy({ rules: [{ effect: "allow", select: "(country=de or country=at) and apache and not cores<4" }] });
  assert.equal(allowed(p, "u", "a"), true);
  assert.equal(allowed(p, "u", "a", { ...node, classes: [] }), false);
  assert.equal(allowed(p, "u", "a", { ...node, facts: { country: "at", cores: 2 } }), false);
});

test("a rule matches only when all its conditions hold", () => {
  const p = policy({ rules: [{ effect: "allow", callers: ["user=alice"], actions: ["runonce"], facts: ["country=de"], classes: ["apache"], select: "cores>4" }] });
  assert.equal(allowed(p, "user=alice", "runonce"), true);
  assert.equal(allowed(p, "user=bob", "runonce"), false);
  assert.equal(allowed(p, "user=alice", "disable"), false);
  assert.equal(allowed(p, "user=alice", "runonce", { ...node, facts: { ...node.facts, country: "fr" } }), false);
  assert.equal(allowed(p, "user=alice", "runonce", { ...node, classes: ["base"] }), false);
  assert.equal(allowed(p, "user=alice", "runonce", { ...node, facts: { ...node.facts, cores: 4 } }), false);
});

test("first match wins: a deny before an allow denies, and the rule number is reported", () => {
  const p = policy({
    rules: [
      { effect: "deny", callers: ["user=mallory"] },
      { effect: "allow", actions: ["status"] },
      { effect: "deny", actions: ["status"] },
      { effect: "allow", callers: ["/^user=/"], facts: ["country=de"] },
    ],
  });
  assert.deepEqual(p.decide("user=mallory", "status", () => node), { allowed: false, rule: 1 });
  assert.deepEqual(p.decide("user=bob", "status", () => node), { allowed: true, rule: 2 });
  assert.deepEqual(p.decide("user=bob", "runonce", () => node), { allowed: true, rule: 4 });
  assert.deepEqual(p.decide("svc=x", "runonce", () => node), { allowed: false, rule: 0 });
});

test("defaults: deny when a policy exists and no rule matches, unless default: allow; no policy, no decision", () => {
  assert.deepEqual(policy({}).decide("user=alice", "status", () => node), { allowed: false, rule: 0 });
  assert.deepEqual(policy({ rules: [] }).decide("user=alice", "status", () => node), { allowed: false, rule: 0 });
  const open = policy({ default: "allow", rules: [{ effect: "deny", actions: ["disable"] }] });
  assert.equal(allowed(open, "user=alice", "status"), true);
  assert.equal(allowed(open, "user=alice", "disable"), false);
  const all = compilePolicies({ puppet: { rules: [] } });
  assert.equal(all.get("rpcutil"), undefined, "an agent without a policy is not looked at (allowed)");
});

test("node metadata is read only when a rule needs it, and at most once", () => {
  let reads = 0;
  const md = () => {
    reads++;
    return node;
  };
  const p = policy({ rules: [{ effect: "deny", callers: ["user=mallory"] }, { effect: "deny", facts: ["country=fr"] }, { effect: "allow", classes: ["apache"] }] });
  assert.equal(p.decide("user=mallory", "x", md).allowed, false);
  assert.equal(reads, 0);
  assert.equal(p.decide("user=alice", "x", md).allowed, true);
  assert.equal(reads, 1);
});

test("the refusal message names caller, agent, action and the rule, not the policy's content", () => {
  assert.equal(denialMessage("n1", "user=bob", "puppet", "runonce", { allowed: false, rule: 3 }), "denied by policy on n1: user=bob may not call puppet#runonce (rule 3)");
  assert.match(denialMessage("n1", "user=bob", "puppet", "runonce", { allowed: false, rule: 0 }), /^denied by policy on n1: .*no rule allows it/);
});

test("malformed policies are config errors naming agent, rule and field", () => {
  const bad: [unknown, RegExp][] = [
    [{ rules: [{ effect: "maybe" }] }, /puppet\.rules\.0\.effect/],
    [{ rules: [{ effect: "allow", callers: [] }] }, /rules\.0\.callers.*empty list/],
    [{ rules: [{ effect: "allow", callers: ["/[/"] }] }, /rules\.0\.callers\.0/],
    [{ rules: [{ effect: "allow", callers: ["user alice"] }] }, /rules\.0\.callers\.0/],
    [{ rules: [{ effect: "allow", actions: ["run once"] }] }, /rules\.0\.actions\.0/],
    [{ rules: [{ effect: "allow" }, { effect: "deny", facts: ["country"] }] }, /rules\.1\.facts\.0/],
    [{ rules: [{ effect: "allow", classes: ["/(/"] }] }, /rules\.0\.classes\.0/],
    [{ rules: [{ effect: "allow", select: "country=de and (" }] }, /rules\.0\.select/],
    [{ rules: [{ effect: "allow", select: "provision().locked=false" }] }, /rules\.0\.select: data plugins \(provision\(\)\) cannot decide a policy/],
    [{ rules: [{ effect: "allow", select: "fact('country').value=de" }] }, /data plugins/],
    [{ rules: [{ effect: "allow", who: ["x"] }] }, /rules\.0/],
    [{ default: "deny", rule: [] }, /puppet/],
    [{ rules: "allow all" }, /puppet\.rules/],
  ];
  for (const [p, re] of bad) {
    assert.throws(() => compilePolicies({ puppet: p }), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_CONFIG_INVALID" && re.test(e.message), JSON.stringify(p));
    // the same errors surface when the server config is loaded
    const r = ServerConfigSchema.safeParse({ policies: { puppet: p } });
    assert.equal(r.success, false, JSON.stringify(p));
  }
  assert.throws(() => compilePolicies({ "Bad.Agent": {} }), /agent names/);
});

test("policy files: <agent>.yaml in policy_dir; an agent in both places is refused", () => {
  const tmp = tempDir("policy");
  try {
    const dir = join(tmp.path, "policies");
    mkdirSync(dir);
    writeFileSync(join(dir, "puppet.yaml"), "rules:\n  - effect: allow\n    callers: [user=alice]\n");
    writeFileSync(join(dir, "nrpe.json"), JSON.stringify({ default: "allow" }));
    writeFileSync(join(dir, "README.txt"), "ignored");
    const files = readPolicyDir(dir);
    assert.deepEqual(Object.keys(files).sort(), ["nrpe", "puppet"]);
    const merged = compilePolicies(mergePolicies({ rpcutil: { default: "deny", rules: [] } }, dir));
    assert.equal(allowed(merged.get("puppet")!, "user=alice", "x"), true);
    assert.equal(allowed(merged.get("nrpe")!, "user=bob", "x"), true);
    assert.equal(allowed(merged.get("rpcutil")!, "user=alice", "ping"), false);
    assert.throws(() => mergePolicies({ puppet: { default: "allow", rules: [] } }, dir), /both in the server config/);
    assert.deepEqual(readPolicyDir(join(tmp.path, "absent")), {});
    writeFileSync(join(dir, "broken.yaml"), "rules:\n  - effect: allow\n    select: 'x=('\n");
    assert.throws(() => readPolicyDir(dir), /broken\.yaml is invalid:\n\s+rules\.0\.select/);
  } finally {
    tmp.remove();
  }
});

test("start-up warnings: policies for agents not loaded and actions the DDL lacks", () => {
  const w = policyWarnings(
    {
      rpcutil: { default: "deny", rules: [{ effect: "allow", actions: ["ping", "pnig", "/^get_/", "*"] }] },
      puppet: { default: "deny", rules: [] },
    },
    [rpcutilDDL],
  );
  assert.deepEqual(w, ["policies.rpcutil.rules.0.actions names 'pnig', which agent 'rpcutil' does not have", "policy for agent 'puppet', which this node does not load"]);
});
