import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { createNotifyAgent, type SendReply } from "../../src/agents/notify/index.js";
import { Status } from "../../src/protocol/status.js";
import { startWebhookReceiver } from "../../src/lab/receivers.js";
import { freePort } from "../../src/lab/ports.js";
import { makeContext, rejectsWith, type ContextOverrides } from "../support/context.js";
import { startSmtpReceiver } from "../support/smtp.js";

const WAIT = 10_000;
const FIXED = new Date("2030-01-02T03:04:05.000Z");
const agent = createNotifyAgent({ now: () => FIXED });

function send(input: { subject: string; message: string; recipients?: unknown[]; dedupe_key?: string }, ctx: ContextOverrides = {}) {
  return agent.actions.send(input, makeContext({ identity: "node1.test", caller: "user=alice", agent: "notify", action: "send", ...ctx }));
}


async function tempDir(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "muster-notify-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A script that writes its stdin to `out` and its environment's subject/sender next to it. */
async function recorderScript(dir: string): Promise<{ path: string; out: string }> {
  const path = join(dir, "record.sh");
  const out = join(dir, "out.txt");
  await writeFile(path, `#!/bin/sh\ncat > "$1"\nprintf '%s|%s|%s' "$MUSTER_SUBJECT" "$MUSTER_SENDER" "$2" > "$1.env"\n`);
  await chmod(path, 0o755);
  return { path, out };
}

test("webhook: POSTs {subject, message, sender, caller, time} as JSON", async (t) => {
  const hook = await startWebhookReceiver();
  t.after(() => hook.close());
  const reply = (await send({ subject: "node1 provisioned", message: "all done\nline 2", recipients: [hook.url] })) as SendReply;
  assert.deepEqual(reply, { duplicate: false, delivered: 1, failed: 0, results: [{ recipient: hook.url, ok: true }] });
  const [body] = await hook.waitFor(1, WAIT);
  assert.deepEqual(body, {
    subject: "node1 provisioned",
    message: "all done\nline 2",
    sender: "node1.test",
    caller: "user=alice",
    time: FIXED.toISOString(),
  });
});

test("webhook receiver appends each body to its file as a JSON line", async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, "hooks.jsonl");
  const hook = await startWebhookReceiver({ file });
  t.after(() => hook.close());
  await send({ subject: "a", message: "one", recipients: [hook.url] });
  await send({ subject: "b", message: "two", recipients: [hook.url] });
  await hook.waitFor(2, WAIT);
  const lines = (await readFile(file, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { message: string });
  assert.deepEqual(lines.map((l) => l.message), ["one", "two"]);
  await assert.rejects(hook.waitFor(3, 50), /expected 3 POST\(s\) within 50 ms, got 2/);
});

test("mailto: delivers through SMTP with subject, body and recipient", async (t) => {
  const smtp = await startSmtpReceiver();
  t.after(() => smtp.close());
  const smtpConfig = { host: smtp.host, port: smtp.port, from: "muster@lab.test" };
  const message = "node1.test is now managed by puppet.\nÜmlauts and a long line: " + "x".repeat(200);
  const reply = (await send(
    { subject: "Provisioned: node1.test ✓", message, recipients: ["mailto:ops@example.test", "mailto:oncall@example.test"] },
    { config: { smtp: smtpConfig } },
  )) as SendReply;
  assert.equal(reply.delivered, 2);
  const mails = await smtp.waitFor(2, WAIT);
  assert.deepEqual(mails.flatMap((m) => m.to).sort(), ["oncall@example.test", "ops@example.test"]);
  for (const m of mails) {
    assert.equal(m.from, "muster@lab.test");
    assert.equal(m.subject, "Provisioned: node1.test ✓");
    assert.equal(m.text, message);
    assert.equal(m.headers["x-muster-sender"], "node1.test");
    assert.equal(m.headers["x-muster-caller"], "user=alice");
  }
});

test("exec: runs the command without a shell, message on stdin, subject and sender in env", async (t) => {
  const dir = await tempDir(t);
  const { path, out } = await recorderScript(dir);
  const recipient = `exec:${path} ${out} extra-arg`;
  const reply = (await send(
    { subject: "hello; rm -rf /", message: "body via stdin\n", recipients: [recipient] },
    { config: { exec_commands: [path] } },
  )) as SendReply;
  assert.deepEqual(reply.results, [{ recipient, ok: true }]);
  assert.equal(await readFile(out, "utf8"), "body via stdin\n");
  assert.equal(await readFile(`${out}.env`, "utf8"), "hello; rm -rf /|node1.test|extra-arg");
});

test("exec: a request may not run a command the node did not allow; a non-zero exit is a failure", async (t) => {
  const dir = await tempDir(t);
  const { path } = await recorderScript(dir);
  const refused = await rejectsWith(send({ subject: "s", message: "m", recipients: [`exec:${path} ${join(dir, "x")}`] }), Status.InvalidData);
  assert.match(refused.message, /exec_commands/);

  const failing = join(dir, "fail.sh");
  await writeFile(failing, "#!/bin/sh\necho 'no pager today' >&2\nexit 3\n");
  await chmod(failing, 0o755);
  const e = await rejectsWith(send({ subject: "s", message: "m" }, { config: { recipients: [`exec:${failing}`] } }), Status.Aborted);
  assert.deepEqual(e.data, {
    duplicate: false,
    delivered: 0,
    failed: 1,
    results: [{ recipient: `exec:${failing}`, ok: false, error: `${failing} exited with code 3: no pager today` }],
  });
});

test("a failing webhook and an unreachable port are reported per recipient while the rest are delivered", async (t) => {
  const good = await startWebhookReceiver();
  t.after(() => good.close());
  const bad = await startWebhookReceiver({ status: 500 });
  t.after(() => bad.close());
  const deadUrl = `http://127.0.0.1:${await freePort()}/hook`;
  const e = await rejectsWith(send({ subject: "s", message: "m", recipients: [good.url, bad.url, deadUrl] }), Status.Aborted);
  assert.match(e.message, /^2 of 3 deliveries failed: /);
  const data = e.data as unknown as SendReply;
  assert.equal(data.delivered, 1);
  assert.equal(data.failed, 2);
  assert.deepEqual(data.results[0], { recipient: good.url, ok: true });
  assert.equal(data.results[1]?.ok, false);
  assert.match(data.results[1]?.error ?? "", /HTTP 500/);
  assert.equal(data.results[2]?.ok, false);
  assert.match(data.results[2]?.error ?? "", /ECONNREFUSED/);
  assert.equal((await good.waitFor(1, WAIT)).length, 1);
  assert.equal((await bad.waitFor(1, WAIT)).length, 1);
});

test("unknown schemes and malformed recipients are InvalidData and nothing is sent", async (t) => {
  const hook = await startWebhookReceiver();
  t.after(() => hook.close());
  const e = await rejectsWith(send({ subject: "s", message: "m", recipients: [hook.url, "ftp://127.0.0.1/x"] }), Status.InvalidData);
  assert.match(e.message, /unknown scheme "ftp:"/);
  await rejectsWith(send({ subject: "s", message: "m", recipients: ["ops@example.test"] }), Status.InvalidData);
  await rejectsWith(send({ subject: "s", message: "m", recipients: ["mailto:not-an-address"] }), Status.InvalidData);
  await rejectsWith(send({ subject: "s", message: "m", recipients: ["exec:relative/cmd"] }), Status.InvalidData);
  await rejectsWith(send({ subject: "s", message: "m", recipients: [42] }), Status.InvalidData);
  assert.deepEqual(hook.received, []);
});

test("recipients come from config when the request names none; none anywhere is MissingData", async (t) => {
  const hook = await startWebhookReceiver();
  t.after(() => hook.close());
  const dir = await tempDir(t);
  const { path, out } = await recorderScript(dir);
  // Configured exec recipients are trusted without exec_commands.
  const recipients = [hook.url, `exec:${path} ${out}`];
  const reply = (await send({ subject: "from config", message: "cfg" }, { config: { recipients } })) as SendReply;
  assert.deepEqual(reply.results, [
    { recipient: hook.url, ok: true },
    { recipient: `exec:${path} ${out}`, ok: true },
  ]);
  assert.deepEqual(((await hook.waitFor(1, WAIT))[0] as { subject: string }).subject, "from config");
  assert.equal(await readFile(out, "utf8"), "cfg");
  await rejectsWith(send({ subject: "s", message: "m" }), Status.MissingData);
  await rejectsWith(send({ subject: "s", message: "m" }, { config: { timeout: "soon" } }), Status.UnknownError);
});

test("aborting the context's signal stops a delivery in flight", async (t) => {
  const hung = createServer(() => undefined); // accepts the request, never answers
  hung.listen(0, "127.0.0.1");
  await once(hung, "listening");
  t.after(() => {
    hung.closeAllConnections();
    return new Promise<void>((resolve) => hung.close(() => resolve()));
  });
  const addr = hung.address();
  assert.ok(addr && typeof addr === "object");
  const arrived = once(hung, "request");
  const ctx = makeContext({ agent: "notify", action: "send", config: { timeout: 600 } });
  const pending = agent.actions.send({ subject: "s", message: "m", recipients: [`http://127.0.0.1:${addr.port}/`] }, ctx);
  await arrived;
  ctx.abort(new Error("server shutting down"));
  const e = await rejectsWith(pending, Status.Aborted);
  assert.match(e.message, /aborted: server shutting down/);
});

test("a delivery that outlives the configured timeout fails with a clear reason", async (t) => {
  const hung = createServer(() => undefined);
  hung.listen(0, "127.0.0.1");
  await once(hung, "listening");
  t.after(() => {
    hung.closeAllConnections();
    return new Promise<void>((resolve) => hung.close(() => resolve()));
  });
  const addr = hung.address();
  assert.ok(addr && typeof addr === "object");
  const e = await rejectsWith(
    send({ subject: "s", message: "m", recipients: [`http://127.0.0.1:${addr.port}/`] }, { config: { timeout: 0.2 } }),
    Status.Aborted,
  );
  assert.match(e.message, /timed out after 0.2 s/);
});

test("dedupe_key: a repeat (concurrent or later) is acknowledged without sending; a failed delivery may be retried", async (t) => {
  const hook = await startWebhookReceiver();
  t.after(() => hook.close());
  const own = createNotifyAgent({ now: () => FIXED });
  const call = (key: string, recipients: unknown[] = [hook.url]) =>
    own.actions.send({ subject: "s", message: "m", recipients, dedupe_key: key }, makeContext({ identity: "n1", caller: "provisioner", agent: "notify", action: "send" })) as Promise<SendReply>;
  // the provisioner's retry after a lost reply arrives while the first is still delivering
  const [a, b] = await Promise.all([call("web1#1#provisioned"), call("web1#1#provisioned")]);
  const later = await call("web1#1#provisioned");
  assert.deepEqual([a.duplicate, b.duplicate, later.duplicate].sort(), [false, true, true]);
  await call("web1#2#provisioned"); // another round is another notification
  await hook.waitFor(2, WAIT);
  assert.equal(hook.received.length, 2, "one delivery per key");
  // a key whose delivery failed is not remembered
  const dead = `http://127.0.0.1:${await freePort("127.0.0.1")}/`;
  await rejectsWith(call("web2#1#provisioned", [dead]), Status.Aborted);
  const retried = await call("web2#1#provisioned");
  assert.equal(retried.duplicate, false);
  await hook.waitFor(3, WAIT);
});
