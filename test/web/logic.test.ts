import { test } from "node:test";
import assert from "node:assert/strict";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { RUNALL_AGENT, asRunallEvent } from "../../src/protocol/events.js";
import { afterLogin, allowed, certificateRole, Csrf, parseTokensFile, SessionStore, TokenTable } from "../../src/web/auth.js";
import { isLoopback } from "../../src/security/loopback.js";
import { boardNode, boardOrder, timeline } from "../../src/web/board.js";
import { parseListen, WebConfigSchema } from "../../src/web/config.js";
import { countBy, explorerFilter, page, parseColumns } from "../../src/web/explorer.js";
import { RunTable } from "../../src/web/runs.js";
import { FilterError } from "../../src/filter/index.js";

// The console's pure parts: tokens and roles, board rows and timelines, explorer pages and counts,
// runall views folded from events.

test("tokens file: three fields a line, known roles, long unique tokens; errors name the line", () => {
  const t = parseTokensFile("# people\n\nabcdefghijklmnop operator alice\nqrstuvwxyz012345 viewer bob\n");
  assert.equal(t.size, 2);
  assert.throws(() => parseTokensFile("short operator alice"), /line 1: the token is shorter than 16/);
  assert.throws(() => parseTokensFile("abcdefghijklmnop admin alice"), /line 1: role "admin" is not one of viewer, operator/);
  assert.throws(() => parseTokensFile("abcdefghijklmnop operator"), /line 1: expected "<token> <role> <name>"/);
  assert.throws(() => parseTokensFile("abcdefghijklmnop operator a\nabcdefghijklmnop viewer b"), /line 2: this token is already/);
  const table = TokenTable.fromText("abcdefghijklmnop operator alice");
  assert.deepEqual(table.lookup("abcdefghijklmnop"), { name: "alice", role: "operator" });
  assert.equal(table.lookup("abcdefghijklmnoq"), undefined);
});

test("roles: operators may do what viewers may, not the reverse; certificates map by CN", () => {
  assert.ok(allowed("operator", "operator") && allowed("operator", "viewer") && allowed("viewer", "viewer"));
  assert.ok(!allowed("viewer", "operator"));
  assert.equal(certificateRole({ alice: "operator", "CN=bob": "viewer" }, "alice"), "operator");
  assert.equal(certificateRole({ alice: "operator", "CN=bob": "viewer" }, "bob"), "viewer");
  assert.equal(certificateRole({ alice: "operator" }, "mallory"), undefined);
  assert.equal(certificateRole({ alice: "operator" }, "constructor"), undefined);
});

test("sessions expire; CSRF tokens are bound to the credential", () => {
  const s = new SessionStore(1000);
  const a = s.create("alice", "operator", 0);
  assert.equal(s.get(a.id, 500)?.name, "alice");
  assert.equal(s.get(a.id, 1000), undefined);
  const c = new Csrf();
  assert.ok(c.check("s:1", c.tokenFor("s:1")));
  assert.ok(!c.check("s:2", c.tokenFor("s:1")));
  assert.ok(!c.check("s:1", undefined));
});

test("listen addresses and the loopback default", () => {
  assert.deepEqual(parseListen("127.0.0.1:8480"), { host: "127.0.0.1", port: 8480 });
  assert.deepEqual(parseListen("[::1]:9"), { host: "::1", port: 9 });
  assert.throws(() => parseListen("8480"), /HOST:PORT/);
  assert.ok(isLoopback("127.0.0.9") && isLoopback("::1") && !isLoopback("0.0.0.0"));
  assert.equal(WebConfigSchema.parse({ auth: { tokens_file: "t" } }).listen, "127.0.0.1:8480");
  assert.throws(() => WebConfigSchema.parse({}), /tokens_file/);
});

const T0 = Date.parse("2026-01-01T00:00:00Z");
const rec = (o: Partial<NodeRecord>): NodeRecord => ({ ...newRecord("n1.test", T0), ...o });

test("board rows: stage while in progress, elapsed, tries; failed nodes first", () => {
  const r = boardNode(rec({ status: "in_progress", stage: "sign_csr", current: "bootstrap", startedAt: T0, attempts: 2, master: "m1" }), T0 + 12_345);
  assert.equal(r.stage, "bootstrap");
  assert.equal(r.elapsed_s, 12.3);
  assert.equal(r.tries, 2);
  assert.equal(r.started, "2026-01-01T00:00:00.000Z");
  // a failed node names the step that failed, not the one completed before it, and that step's bar
  // ends when it failed rather than growing with the clock
  const failed = boardNode(rec({ status: "failed", stage: "sign_csr", current: "bootstrap", startedAt: T0, finishedAt: T0 + 5000, stageTimes: { sign_csr: { start: T0, end: T0 + 1000 }, bootstrap: { start: T0 + 1000 } } }), T0 + 9000);
  assert.equal(failed.stage, "bootstrap");
  assert.deepEqual(failed.timeline.at(-1), { stage: "bootstrap", start: new Date(T0 + 1000).toISOString(), end: new Date(T0 + 5000).toISOString() });
  const done = boardNode(rec({ status: "done", stage: "notify", startedAt: T0, finishedAt: T0 + 60_000 }), T0 + 999_999);
  assert.equal(done.elapsed_s, 60);
  const rows = [boardNode(rec({ identity: "b", status: "done" })), boardNode(rec({ identity: "c", status: "failed" })), boardNode(rec({ identity: "a", status: "in_progress" }))];
  assert.deepEqual(rows.sort(boardOrder).map((x) => x.identity), ["c", "a", "b"]);
});

test("timelines: from stageTimes, or for older records from the log's 'ok (N ms)' lines", () => {
  const fromTimes = timeline(rec({ stageTimes: { lock: { start: T0, end: T0 + 10 }, bootstrap: { start: T0 + 10 } } }));
  assert.deepEqual(fromTimes, [
    { stage: "lock", start: "2026-01-01T00:00:00.000Z", end: "2026-01-01T00:00:00.010Z" },
    { stage: "bootstrap", start: "2026-01-01T00:00:00.010Z" },
  ]);
  const fromLog = timeline(rec({ status: "in_progress", current: "bootstrap", startedAt: T0, log: ["2026-01-01T00:00:01.000Z lock ok (200 ms)", "2026-01-01T00:00:02.000Z request_csr ok: sent (500 ms)", "2026-01-01T00:00:03.000Z something else"] }));
  assert.deepEqual(fromLog.map((e) => [e.stage, e.start, e.end]), [
    ["lock", "2026-01-01T00:00:00.800Z", "2026-01-01T00:00:01.000Z"],
    ["request_csr", "2026-01-01T00:00:01.500Z", "2026-01-01T00:00:02.000Z"],
    ["bootstrap", "2026-01-01T00:00:02.000Z", undefined],
  ]);
});

test("explorer: the filter box is the -S language with column errors; pages and counts as muster facts", () => {
  assert.deepEqual(explorerFilter("").compound, []);
  assert.deepEqual(explorerFilter("country=de and web").compound, ["country=de and web"]);
  assert.throws(() => explorerFilter("country=de and"), (e: unknown) => e instanceof FilterError && e.column > 0);
  assert.deepEqual(parseColumns(" a, b ,a"), ["a", "b"]);
  assert.throws(() => parseColumns("a b"), /not a fact name/);
  const nodes = [
    { identity: "z", facts: { os: { family: "Debian" } }, classes: [], agents: [], collectives: [] },
    { identity: "a", facts: { os: { family: "RedHat" } }, classes: [], agents: [], collectives: [] },
    { identity: "m", facts: { os: { family: "Debian" } }, classes: [], agents: [], collectives: [] },
    { identity: "q", facts: {}, classes: [], agents: [], collectives: [] },
  ];
  assert.deepEqual(page(nodes, ["os.family"], 1, 2), { total: 4, nodes: [{ identity: "m", columns: { "os.family": "Debian" } }, { identity: "q", columns: { "os.family": null } }] });
  assert.deepEqual(countBy(nodes, "os.family"), [{ value: "Debian", count: 2 }, { value: "(missing)", count: 1 }, { value: "RedHat", count: 1 }]);
});

test("runall views fold started/progress/finished events; malformed events are ignored", () => {
  const ev = (event: string, data: Record<string, unknown>) => asRunallEvent({ identity: "h.test", agent: RUNALL_AGENT, event, time: 0, data });
  assert.equal(ev("started", { id: "r1" }), undefined);
  assert.equal(ev("exploded", { id: "r1" }), undefined);
  const t = new RunTable();
  assert.equal(t.apply(ev("progress", { id: "ghost", type: "start", identity: "a", at: T0 })!), undefined);
  t.apply(ev("started", { id: "r1", started_by: "alice", started: T0, filter: "-C web", concurrency: 2, total: 3 })!);
  t.apply(ev("progress", { id: "r1", type: "start", identity: "a", at: T0 + 1 })!);
  let v = t.apply(ev("progress", { id: "r1", type: "start", identity: "b", at: T0 + 2 })!)!;
  assert.deepEqual(v.slots.map((s) => s.identity), ["a", "b"]);
  v = t.apply(ev("progress", { id: "r1", type: "finish", identity: "a", at: T0 + 3, outcome: "failed", done: 1, total: 3 })!)!;
  assert.deepEqual([v.done, v.failed, v.slots.length, v.state], [1, 1, 1, "running"]);
  v = t.apply(ev("finished", { id: "r1", at: T0 + 9, counts: { ok: 2, failed: 1 } })!)!;
  assert.deepEqual([v.done, v.slots.length, v.state], [3, 0, "finished"]);
});

test("after logging in: the deep link's fragment of this console, never another site or path", () => {
  assert.equal(afterLogin("#/node/node01.eu.lab"), "/#/node/node01.eu.lab");
  assert.equal(afterLogin("#/explorer?filter=country%3Dde&columns=os"), "/#/explorer?filter=country%3Dde&columns=os");
  for (const bad of [undefined, "", "#", "//evil.example/", "https://evil.example/#/board", "/api/board", "#/x\r\nset-cookie: a=b", "#/<script>", `#/${"a".repeat(3000)}`, 42]) assert.equal(afterLogin(bad), "/", String(bad).slice(0, 40));
});

test("a record the provisioner marked gone: shown with since and why while waited on, ordered right after failed", () => {
  const now = Date.parse("2026-02-01T10:00:00Z");
  const goneRec = { ...newRecord("gone.test", now), status: "in_progress" as const, current: "request_csr" as const, startedAt: now - 60_000, gone: { since: now - 5000, reason: "the VM was destroyed" } };
  const n = boardNode(goneRec, now);
  assert.deepEqual(n.gone, { since: new Date(now - 5000).toISOString(), reason: "the VM was destroyed" });
  assert.equal(boardNode({ ...goneRec, status: "done" }, now).gone, null, "a done node is not waited on");
  assert.equal(boardNode({ ...goneRec, gone: { since: "yesterday" } } as unknown as NodeRecord, now).gone, null, "a malformed mark is ignored");
  assert.equal(boardNode({ ...goneRec, gone: { since: now } } as unknown as NodeRecord, now).gone?.reason, "gone");
  const order = [boardNode({ ...newRecord("a.test"), status: "in_progress" }, now), n, boardNode({ ...newRecord("z.test"), status: "failed" }, now), boardNode({ ...newRecord("b.test"), status: "pending" }, now)].sort(boardOrder);
  assert.deepEqual(order.map((x) => x.identity), ["z.test", "gone.test", "a.test", "b.test"]);
});

test("a record waiting for a Puppet master: shown with since, why and the master while in progress, never for a node that ended", () => {
  const now = Date.parse("2026-02-01T10:00:00Z");
  const rec: NodeRecord = { ...newRecord("wait.test", now), status: "in_progress", current: "bootstrap", master: "m1", startedAt: now - 60_000, masterWait: { since: now - 5000, reason: "waiting for its master m1, which does not answer", master: "m1" } };
  assert.deepEqual(boardNode(rec, now).waiting, { since: new Date(now - 5000).toISOString(), reason: "waiting for its master m1, which does not answer", master: "m1" });
  assert.deepEqual(boardNode({ ...rec, masterWait: { since: now, reason: "waiting for a Puppet master: none answers (agent puppetca)" } }, now).waiting?.master, null, "any master");
  assert.equal(boardNode({ ...rec, status: "failed" }, now).waiting, null);
  assert.equal(boardNode({ ...rec, gone: { since: now, reason: "no answer" } }, now).waiting, null, "a gone node is shown gone");
  assert.equal(boardNode({ ...newRecord("n"), status: "in_progress" }, now).waiting, null);
});
