import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createPuppetAgent, type MusterPuppetAgent } from "../../src/agents/puppet/index.js";
import type { RunCompleteData } from "../../src/agents/puppet/ddl.js";
import type { ReplyData } from "../../src/agent/agent.js";
import { callAction, makeContext, rejectsWith, type TestContext } from "../support/context.js";
import { Status } from "../../src/protocol/status.js";
import { tempDir } from "../support/collective.js";

// The puppet agent's handlers on their own (no broker, no master): refusals, the disable lock in
// Puppet's format, and a background run of the real puppet binary whose end is the run_complete
// event (here a run that cannot reach a master, so it fails fast).

const tmp = tempDir("puppet-agent");
const id = "unit.puppet.test";
let config: Record<string, unknown>;
let agent: MusterPuppetAgent;
let clock = Date.parse("2026-11-21T10:00:00Z");

function call(action: string, input: Record<string, unknown> = {}, ctx: TestContext = makeContext({ identity: id, config, agent: "puppet", action })): Promise<ReplyData> {
  return callAction(agent, action, input, ctx);
}

/** An Aborted reply whose message matches `re`. */
const refused = (p: Promise<unknown>, re: RegExp) => rejectsWith(p, Status.Aborted, re);

before(() => {
  config = { confdir: join(tmp.path, "conf"), vardir: join(tmp.path, "var"), ssldir: join(tmp.path, "ssl"), server: "127.0.0.1", serverport: 1, run_timeout: 120 };
  for (const d of ["conf", "var", "ssl"]) mkdirSync(join(tmp.path, d), { recursive: true });
  agent = createPuppetAgent({ config, identity: id, now: () => clock, random: () => 0.5 });
});
after(() => tmp.remove());

describe("puppet agent", () => {
  it("disable writes Puppet's JSON lock with a default message naming the caller and time; enable removes it", async () => {
    const r = await call("disable");
    assert.deepEqual(r, { enabled: false, changed: true, disable_message: "Disabled via muster by user=test at 2026-11-21T10:00:00.000Z", status: "Puppet disabled: Disabled via muster by user=test at 2026-11-21T10:00:00.000Z" });
    assert.deepEqual(JSON.parse(readFileSync(join(tmp.path, "var", "state", "agent_disabled.lock"), "utf8")), { disabled_message: "Disabled via muster by user=test at 2026-11-21T10:00:00.000Z" });
    const again = await call("disable", { message: "other" });
    assert.equal(again.changed, false, "an existing lock and its message are kept");
    assert.match(String(again.status), /already disabled: Disabled via muster/);
    const plugin = agent.dataPlugins!.find((p) => p.name === "puppet")!;
    const md = { metadata: { identity: id, facts: {}, classes: [], agents: ["puppet"], collectives: ["muster"] } };
    assert.equal((await plugin.query(undefined, md))?.enabled, false);
    await refused(call("runonce"), /^Puppet is disabled on unit\.puppet\.test: Disabled via muster by user=test/);
    assert.deepEqual(await call("enable"), { enabled: true, changed: true, status: "Puppet enabled" });
    assert.deepEqual(await call("enable"), { enabled: true, changed: false, status: "Puppet was already enabled" });
    assert.equal((await plugin.query(undefined, md))?.enabled, true);
    // the runinterval its heartbeat carries (fleet health's stale threshold) is puppet.conf's
    assert.equal((await plugin.query(undefined, md))?.runinterval, 1800, "Puppet's default with no puppet.conf");
    writeFileSync(join(tmp.path, "conf", "puppet.conf"), "[main]\nruninterval = 1h\n[agent]\nruninterval = 15m\n");
    assert.equal((await plugin.query(undefined, md))?.runinterval, 900);
  });

  it("refuses a server override unless allowed; refuses while Puppet's run lock names a live process", async () => {
    await refused(call("runonce", { server: "127.0.0.1:8140" }), /does not let runonce choose the master/);
    mkdirSync(join(tmp.path, "var", "state"), { recursive: true });
    writeFileSync(join(tmp.path, "var", "state", "agent_catalog_run.lock"), String(process.pid));
    await refused(call("runonce"), new RegExp(`already applying a catalog on ${id.replace(/\./g, "\\.")} \\(pid ${process.pid}\\)`));
    const st = await call("status");
    assert.equal(st.applying, true);
    assert.equal(st.status, "applying a catalog");
    writeFileSync(join(tmp.path, "var", "state", "agent_catalog_run.lock"), "999999999"); // a stale lock: no such process
    assert.equal((await call("status")).applying, false);
  });

  it("runonce answers at once; a splay shows as splaying; the end (here a failure) is run_complete", async () => {
    const ctx = makeContext({ identity: id, config, agent: "puppet", action: "runonce" });
    const r = await call("runonce", { splay: true, splaylimit: 1, noop: true }, ctx);
    assert.deepEqual(r, { started: true, summary: "Puppet run starts in 0.5 s (splay)", initiated_at: clock, splay_seconds: 0.5 });
    assert.equal((await call("status")).status, "splaying");
    await refused(call("runonce", { force: true }), /already waiting out its splay/);
    await agent.activeRun();
    assert.equal(ctx.emitted.length, 1);
    const ev = ctx.emitted[0]!;
    assert.equal(ev.event, "run_complete");
    const d = ev.data as unknown as RunCompleteData;
    assert.equal(d.requestid, ctx.requestId);
    assert.equal(d.exitcode, 1, d.message);
    assert.equal(d.failed, true);
    assert.equal(d.noop, true);
    const st = await call("status");
    assert.equal(st.applying, false);
    assert.deepEqual(st.last_runonce, d);
    // the node can run again at once
    const next = await call("runonce", { force: true });
    assert.equal(next.splay_seconds, 0);
    await agent.activeRun();
  });
});
