import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { streamsOn } from "../../src/broker/stream.js";
import { MusterError } from "../../src/errors.js";
import { AuditConfigSchema, Auditor, auditLine, subjectMatches, type AuditEntry } from "../../src/security/audit.js";
import { connectNats, eventually, startBroker, tempDir } from "../support/collective.js";

// The audit sinks on their own: what a line looks like, and that a slow, full or missing destination
// costs records (counted) but never an exception or a stalled caller.

const log = pino({ level: "silent" });

function entry(i: number, over: Partial<AuditEntry> = {}): AuditEntry {
  return { time: Date.UTC(2024, 0, 2, 3, 4, 5, 6), identity: "n1", requestid: `r${i}`, caller: "user=alice", sender: "host:1", agent: "rpcutil", action: "ping", data: { i }, statuscode: 0, statusmsg: "OK", ...over };
}

test("a line is one JSON object with an ISO time", () => {
  const line = auditLine(entry(1, { data: { text: "two\nlines" } }));
  assert.ok(line.endsWith("\n"));
  assert.equal(line.indexOf("\n"), line.length - 1, "newlines inside values are escaped");
  assert.deepEqual(JSON.parse(line), { ...entry(1, { data: { text: "two\nlines" } }), time: "2024-01-02T03:04:05.006Z" });
});

test("file: appended, created 0600 with its directory; every record written in order", async () => {
  const tmp = tempDir("audit");
  try {
    const file = join(tmp.path, "a", "b", "audit.jsonl");
    const a = new Auditor(AuditConfigSchema.parse({ file }), { identity: "n1", log });
    for (let i = 0; i < 1000; i++) a.record(entry(i));
    await a.close();
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    assert.equal(lines.length, 1000);
    assert.deepEqual(lines.map((l) => (JSON.parse(l) as AuditEntry).requestid), Array.from({ length: 1000 }, (_, i) => `r${i}`));
    assert.deepEqual(a.stats, { audit_written: 1000, audit_published: 0, audit_dropped: 0 });
    // a second auditor appends
    const b = new Auditor(AuditConfigSchema.parse({ file }), { identity: "n1", log });
    b.record(entry(1000));
    await b.close();
    assert.equal(readFileSync(file, "utf8").trimEnd().split("\n").length, 1001);
    b.record(entry(1001)); // after close: dropped, not thrown
    assert.equal(b.stats.audit_dropped, 1);
  } finally {
    tmp.remove();
  }
});

test("file: beyond the buffer, records are dropped and counted; the caller never waits", async () => {
  const tmp = tempDir("audit");
  try {
    const file = join(tmp.path, "audit.jsonl");
    const a = new Auditor(AuditConfigSchema.parse({ file, buffer: 5 }), { identity: "n1", log });
    // the first record starts a write; five more wait; the rest do not fit
    for (let i = 0; i < 100; i++) a.record(entry(i));
    await a.close();
    assert.deepEqual(a.stats, { audit_written: 6, audit_published: 0, audit_dropped: 94 });
  } finally {
    tmp.remove();
  }
});

test("file: a path that cannot be opened is a config error at start-up", () => {
  const tmp = tempDir("audit");
  try {
    mkdirSync(join(tmp.path, "dir"));
    assert.throws(() => new Auditor(AuditConfigSchema.parse({ file: join(tmp.path, "dir") }), { identity: "n1", log }), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_CONFIG_INVALID" && /audit\.file .*dir cannot be opened/.test(e.message));
  } finally {
    tmp.remove();
  }
});

test("file: a full disk (/dev/full) keeps records in memory up to the buffer, counts the rest, never throws", { skip: !existsSync("/dev/full") && "no /dev/full on this machine: it is what makes a write fail as a full disk does" }, async () => {
  const a = new Auditor(AuditConfigSchema.parse({ file: "/dev/full", buffer: 10 }), { identity: "n1", log });
  for (let i = 0; i < 50; i++) a.record(entry(i));
  await eventually(async () => (a.stats.audit_dropped >= 40 ? true : undefined), 5000, "drops counted");
  assert.equal(a.stats.audit_written, 0);
  await a.close(200);
  assert.equal(a.stats.audit_dropped, 50, "what was held when closing is counted too");
});

test("stream: while JetStream is unavailable records wait (bounded), and closing counts what never got out", async () => {
  const broker = await startBroker(); // no JetStream
  const nc = await connectNats(broker.url);
  try {
    const a = new Auditor(AuditConfigSchema.parse({ stream: {}, buffer: 10 }), { identity: "n1", log });
    a.connect(streamsOn(nc));
    // recording does not wait for the broker: record() returns nothing to wait on, and by the time
    // the 25 calls return the 10 the buffer holds are held and the other 15 counted
    for (let i = 0; i < 25; i++) assert.equal(a.record(entry(i)), undefined);
    assert.equal(a.stats.audit_dropped, 15);
    await a.close(100);
    assert.deepEqual(a.stats, { audit_written: 0, audit_published: 0, audit_dropped: 25 });
  } finally {
    await nc.drain().catch(() => undefined);
    await broker.dispose();
  }
});

test("stream: the publish subject must be one of the stream's subjects", () => {
  assert.throws(() => new Auditor(AuditConfigSchema.parse({ stream: { subjects: ["audit.>"] } }), { identity: "n1", log }), /muster\.audit\.n1 is not among audit\.stream\.subjects/);
  assert.doesNotThrow(() => new Auditor(AuditConfigSchema.parse({ stream: { subjects: ["audit.*.x"], subject: "audit.n1.x" } }), { identity: "n1", log }));
  assert.equal(AuditConfigSchema.safeParse({ stream: { subject: "a.*" } }).success, false);
  assert.equal(AuditConfigSchema.safeParse({ stream: { name: "a.b" } }).success, false);
  assert.equal(AuditConfigSchema.safeParse({ files: "x" }).success, false);
});

test("subject patterns: * one token, > one or more at the end", () => {
  assert.equal(subjectMatches("muster.audit.>", "muster.audit.web1.example.net"), true);
  assert.equal(subjectMatches("muster.audit.>", "muster.audit"), false);
  assert.equal(subjectMatches("muster.*.x", "muster.a.x"), true);
  assert.equal(subjectMatches("muster.*.x", "muster.a.b.x"), false);
  assert.equal(subjectMatches("a.b", "a.b"), true);
  assert.equal(subjectMatches("a.b", "a.b.c"), false);
  assert.equal(subjectMatches(">", "a"), true);
});
