import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loggedArgs } from "../../src/privileged/helper.js";
import { MAX_REQUEST_BYTES, OPERATION_NAMES, parseRequest, peerAllowed } from "../../src/privileged/operations.js";
import { parseServer } from "../../src/puppet/server-address.js";

// The helper's vocabulary, pure: what a compromised daemon could put on the socket, and what of it
// passes. Everything not on the list, or with arguments that are not exactly the operation's own,
// is refused before any setting is read or anything runs (test/privileged/helper.test.ts: on a
// real socket, as another user). And what the helper's log keeps of a request (loggedArgs).

const refused = (line: string, why: RegExp) => {
  const r = parseRequest(line);
  assert.equal(r.ok, false, `accepted: ${line}`);
  if (!r.ok) assert.match(r.error, why, line);
};
const accepted = (req: unknown) => {
  const r = parseRequest(JSON.stringify(req));
  assert.ok(r.ok, `refused ${JSON.stringify(req)}: ${r.ok ? "" : r.error}`);
  return r.request;
};

test("the list is fixed: thirteen operations (three of them read-only), and nothing that names a command or a file", () => {
  assert.deepEqual(OPERATION_NAMES, [
    "puppet.run",
    "puppet.daemonize",
    "puppet.disable",
    "puppet.enable",
    "puppet.cert_status",
    "puppet.request_certificate",
    "puppet.set_server",
    "puppet.tls_credential",
    "puppet.resource",
    "provision.persist_stage",
    "puppet.facts",
    "puppet.read_state",
    "puppet.last_run_report",
  ]);
});

test("an operation off the list is refused: commands, files, prototype names", () => {
  for (const op of ["exec", "shell", "run", "puppet.exec", "write_file", "read_file", "constructor", "__proto__", "toString", "hasOwnProperty", "", "PUPPET.RUN"]) {
    refused(JSON.stringify({ op, args: {} }), /is not on the helper's list/);
  }
  refused(JSON.stringify({ op: ["puppet.run"], args: {} }), /not on the helper's list/);
  refused(JSON.stringify({ args: {} }), /not on the helper's list/);
});

test("the envelope is exactly {op, args}; garbage and oversized lines are refused", () => {
  refused("id; rm -rf /", /not a JSON request/);
  refused("[]", /an object/);
  refused("null", /an object/);
  refused(JSON.stringify({ op: "puppet.enable", args: { agent: "puppet" }, cmd: "id" }), /unexpected fields: cmd/);
  refused(JSON.stringify({ op: "puppet.enable", args: { agent: "puppet", pad: "x".repeat(MAX_REQUEST_BYTES) } }), /over 65536 bytes/);
});

test("arguments are exactly the operation's own: no extra path, command or setting", () => {
  refused(JSON.stringify({ op: "provision.persist_stage", args: { file: "/etc/shadow" } }), /provision\.persist_stage: .*file|Unrecognized key/);
  refused(JSON.stringify({ op: "puppet.run", args: { agent: "puppet", puppet_bin: "/bin/sh" } }), /Unrecognized key/);
  refused(JSON.stringify({ op: "puppet.run", args: { agent: "puppet", confdir: "/tmp/evil" } }), /Unrecognized key/);
  refused(JSON.stringify({ op: "puppet.tls_credential", args: { path: "/etc/shadow" } }), /Unrecognized key/);
  // the read-only operations read Puppet's files by name, never by path
  refused(JSON.stringify({ op: "puppet.read_state", args: { agent: "puppet", file: "/etc/shadow" } }), /file/);
  refused(JSON.stringify({ op: "puppet.read_state", args: { agent: "puppet", file: "classes", path: "/etc/shadow" } }), /Unrecognized key/);
  refused(JSON.stringify({ op: "puppet.facts", args: { command: "/bin/sh" } }), /Unrecognized key/);
  refused(JSON.stringify({ op: "puppet.run", args: { agent: "root" } }), /agent/);
  refused(JSON.stringify({ op: "puppet.run", args: {} }), /agent/);
});

test("nothing Puppet could read as an option or a second setting gets through", () => {
  const run = (args: Record<string, unknown>) => JSON.stringify({ op: "puppet.run", args: { agent: "puppet", ...args } });
  refused(run({ environment: "--server=evil.example.net" }), /environment: a Puppet environment name/);
  refused(run({ environment: "production --server evil" }), /environment/);
  refused(run({ tags: ["--server=evil"] }), /tags\.0: a Puppet tag/);
  refused(run({ facts: { "x --server": "y" } }), /facts/);
  refused(run({ facts: { ok: "line\nPATH=/tmp" } }), /facts\.ok: one line/);
  refused(run({ noop: "yes" }), /noop/);
  refused(JSON.stringify({ op: "puppet.set_server", args: { host: "--server=evil" } }), /host: a host name or IP address/);
  refused(JSON.stringify({ op: "puppet.set_server", args: { host: "evil example" } }), /host/);
  refused(JSON.stringify({ op: "puppet.set_server", args: { host: "master.example.net", port: 0 } }), /port/);
  refused(JSON.stringify({ op: "puppet.set_server", args: { host: "master.example.net\n[agent]" } }), /host/);
  refused(JSON.stringify({ op: "puppet.disable", args: { agent: "puppet", message: "two\nlines" } }), /message: one line/);
  refused(JSON.stringify({ op: "puppet.request_certificate", args: { node_key: "not-a-key" } }), /node_key/);
  const res = (args: Record<string, unknown>) => JSON.stringify({ op: "puppet.resource", args: { type: "file", name: "/srv/x", properties: [], ...args } });
  refused(res({ name: "--debug" }), /name: a resource title/);
  refused(res({ type: "File" }), /type: a resource type/);
  refused(res({ properties: [["ensure=file", "x"]] }), /property name/);
  refused(res({ properties: [["content", "a\nb"]] }), /one-line value/);
  refused(res({ properties: [["content", ""]] }), /properties/);
});

test("what the agents send is accepted, typed", () => {
  const r = accepted({ op: "puppet.run", args: { agent: "provision", environment: "bootstrap", noop: false, facts: { lifecycle_stage: "bootstrap", country: "de" }, tags: ["role::web"] } });
  assert.equal(r.op, "puppet.run");
  accepted({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  accepted({ op: "puppet.set_server", args: { host: "puppet-eu.example.net" } });
  accepted({ op: "puppet.resource", args: { type: "file", name: "/srv/files/hello", properties: [["ensure", "file"], ["content", "hi there"]] } });
  accepted({ op: "puppet.request_certificate", args: { node_key: "3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w0=" } });
  accepted({ op: "provision.persist_stage", args: {} });
  accepted({ op: "puppet.cert_status", args: { download: true } });
  accepted({ op: "puppet.facts", args: {} });
  accepted({ op: "puppet.read_state", args: { agent: "puppet", file: "classes" } });
  accepted({ op: "puppet.last_run_report", args: { agent: "provision" } });
});

test("parseServer: host[:port] only", () => {
  assert.deepEqual(parseServer("puppet.example.net:8140"), { host: "puppet.example.net", port: 8140 });
  assert.deepEqual(parseServer("10.0.0.1"), { host: "10.0.0.1", port: undefined });
  assert.equal(parseServer("--server=x"), undefined);
  assert.equal(parseServer("a:99999"), undefined);
  assert.equal(parseServer("a:b:c"), undefined);
});

test("peerAllowed: exactly the served uid, root included in the refusals", () => {
  assert.equal(peerAllowed(998, 998), true);
  assert.equal(peerAllowed(0, 998), false);
  assert.equal(peerAllowed(65534, 998), false);
  assert.equal(peerAllowed(Number.NaN, 998), false);
});

test("the journal's copy of a request: a run's fact values and a file's content by size and digest, the rest as sent, the request itself untouched", () => {
  const digest = (v: string) => `<${Buffer.byteLength(v)} bytes, sha256 ${createHash("sha256").update(v).digest("hex").slice(0, 16)}>`;
  const secret = "db-password=hunter2-\u00e9";
  const run = accepted({ op: "puppet.run", args: { agent: "provision", environment: "bootstrap", noop: true, tags: ["role::web"], facts: { lifecycle_stage: "bootstrap", app_secret: secret } } });
  const logged = loggedArgs(run);
  assert.deepEqual(logged, { agent: "provision", environment: "bootstrap", noop: true, tags: ["role::web"], facts: { lifecycle_stage: digest("bootstrap"), app_secret: digest(secret) } });
  assert.match((logged.facts as Record<string, string>).app_secret!, /^<22 bytes, sha256 [0-9a-f]{16}>$/, "its size in bytes, not characters");
  assert.equal(JSON.stringify(logged).includes("hunter2"), false);
  assert.equal(run.op === "puppet.run" && run.args.facts?.app_secret, secret, "what runs still gets the value");
  // a run without facts has none to hide, and gains no key
  assert.deepEqual(loggedArgs(accepted({ op: "puppet.run", args: { agent: "puppet" } })), { agent: "puppet" });

  const file = accepted({ op: "puppet.resource", args: { type: "file", name: "/srv/files/token", properties: [["ensure", "file"], ["content", secret], ["mode", "0600"]] } });
  assert.deepEqual(loggedArgs(file), { type: "file", name: "/srv/files/token", properties: [["ensure", "file"], ["content", digest(secret)], ["mode", "0600"]] });
  assert.deepEqual(file.op === "puppet.resource" && file.args.properties[1], ["content", secret], "what runs still gets the content");
  // everything else as it was sent
  assert.deepEqual(loggedArgs(accepted({ op: "puppet.disable", args: { agent: "puppet", message: "maintenance by ops" } })), { agent: "puppet", message: "maintenance by ops" });
});
