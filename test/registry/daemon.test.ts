import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { RegistrySource } from "../../src/client/discovery/registry.js";
import { startEmulator } from "../../src/emulator/emulator.js";
import { generateFleet } from "../../src/emulator/fleet.js";
import { buildFilter, type FilterOptions } from "../../src/filter/index.js";
import { silentLogger } from "../../src/log.js";
import { subjects } from "../../src/protocol/subjects.js";
import { readRegistry } from "../../src/registry/bucket.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry, type RunningRegistry } from "../../src/registry/daemon.js";
import type { RegistryRecord } from "../../src/registry/record.js";
import type { RegistryStore } from "../../src/registry/store.js";
import { connectNats, eventually } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// The registry daemon in-process against a real nats-server with JetStream: registrations from
// real (emulated) nodes and from a hostile publisher, coalesced writes, expiry, the query subject.

let nats: NatsHandle;
let nc: NatsConnection;

before(async () => {
  nats = await startNats();
  nc = await connectNats(nats.url);
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
});

const enc = new TextEncoder();
const reg = (identity: string, extra: Record<string, unknown> = {}) => enc.encode(JSON.stringify({ identity, facts: { country: "de" }, classes: ["base"], agents: ["rpcutil"], collectives: ["muster"], time: Date.now(), ...extra }));

async function registry(t: { after(fn: () => unknown): void }, cfg: Record<string, unknown>): Promise<RunningRegistry> {
  const r = await startRegistry(RegistryConfigSchema.parse({ log: { level: "silent" }, ...cfg }), silentLogger, { nc });
  t.after(() => r.stop());
  return r;
}

/** Resolves once the store holds a record satisfying `pred` (driven by the store's watch events). */
function storeHas(store: RegistryStore, identity: string, pred: (r: RegistryRecord) => boolean = () => true, timeoutMs = 10_000): Promise<RegistryRecord> {
  return new Promise((resolve, reject) => {
    const now = store.get(identity);
    if (now && pred(now)) return resolve(now);
    const timer = setTimeout(() => {
      store.off("update", on);
      reject(new Error(`registry never held a matching record for ${identity} within ${timeoutMs} ms`));
    }, timeoutMs);
    const on = (r: RegistryRecord) => {
      if (r.identity !== identity || !pred(r)) return;
      clearTimeout(timer);
      store.off("update", on);
      resolve(r);
    };
    store.on("update", on);
  });
}

function storeLoses(store: RegistryStore, identity: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!store.get(identity)) return resolve();
    const timer = setTimeout(() => {
      store.off("remove", on);
      reject(new Error(`${identity} did not expire within ${timeoutMs} ms`));
    }, timeoutMs);
    const on = (id: string) => {
      if (id !== identity) return;
      clearTimeout(timer);
      store.off("remove", on);
      resolve();
    };
    store.on("remove", on);
  });
}

test("emulated nodes' registrations fill the registry, and --dm registry answers like broadcast", async (t) => {
  const r = await registry(t, { bucket: "fleet", collectives: ["muster"] });
  const fleet = generateFleet(50);
  const emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, registration: { interval: 30, splay: false } });
  t.after(() => emu.stop());
  await Promise.all(fleet.map((n) => storeHas(r.store, n.identity)));

  const viaService = new RegistrySource(nc, { bucket: "fleet", collective: "muster", via: "service" });
  const viaBucket = new RegistrySource(nc, { bucket: "fleet", collective: "muster", via: "bucket" });
  const { MusterClient } = await import("../../src/client/client.js");
  const client = await MusterClient.connect({ nc });
  const cases: FilterOptions[] = [{}, { fact: ["country=de"] }, { class: ["db"], fact: ["processorcount>4"] }, { select: ["(country=uk or country=fr) and not cache and fact('os.family').value=Debian"] }, { identity: ["/000[1-3]/"] }, { agent: ["rpcutil"] }];
  for (const c of cases) {
    const filter = buildFilter(c);
    const broadcast = await client.discover({ filter, timeoutMs: 5000 });
    assert.ok(broadcast.length > 0, JSON.stringify(c));
    assert.deepEqual(await client.discover({ filter, source: viaService }), broadcast, `service ${JSON.stringify(c)}`);
    assert.equal(viaService.lastVia, "service");
    assert.deepEqual(await client.discover({ filter, source: viaBucket }), broadcast, `bucket ${JSON.stringify(c)}`);
    assert.equal(viaBucket.lastVia, "bucket");
  }
  await client.close();
});

test("hostile registrations are counted and logged, never stop the receiver", async (t) => {
  const r = await registry(t, { bucket: "hostile", collectives: ["muster"], max_payload: 4096 });
  const subject = subjects.registration("muster");
  const garbage: Uint8Array[] = [
    enc.encode("{not json"),
    new Uint8Array([0xc3, 0x28, 0xa0, 0xa1]),
    enc.encode("null"),
    enc.encode('"a string"'),
    new Uint8Array(8192).fill(0x7b),
    reg("bad identity"),
    reg("x", { facts: "country=de" }),
    reg("x", { classes: [1, 2] }),
    reg("x", { agents: ["Upper"] }),
    reg("x", { collectives: ["other"] }),
    reg("x", { time: "soon" }),
    enc.encode(JSON.stringify({ identity: "proto", collectives: ["muster"], facts: JSON.parse('{"__proto__": {"admin": true}}') })),
  ];
  for (const g of garbage) nc.publish(subject, g);
  nc.publish(subject, reg("after-the-garbage.example.net"));
  // Messages from one publisher arrive in order: once this is stored, all the garbage was handled.
  await storeHas(r.store, "after-the-garbage.example.net");
  const s = r.receiver.stats;
  assert.equal(s.received, garbage.length + 1);
  assert.deepEqual(s.rejected, { oversized: 1, garbled: 2, shape: 6, identity: 1, collective: 1 });
  assert.equal(s.accepted, 2, "the __proto__ facts are plain data and the node is accepted");
  assert.equal(({} as Record<string, unknown>)["admin"], undefined);
  assert.deepEqual(r.store.get("proto")?.facts, JSON.parse('{"__proto__": {"admin": true}}'));
});

test("writes are coalesced: repeated registrations with the same data are not rewritten", async (t) => {
  const r = await registry(t, { bucket: "coalesce", collectives: ["muster", "eu"], max_age: 600, refresh: 300, flush_interval: 0.05 });
  const both = (extra: Record<string, unknown> = {}) => reg("n1.example.net", { collectives: ["muster", "eu"], ...extra });
  // the same node in two collectives, three times each: one write
  for (let i = 0; i < 3; i++) {
    nc.publish(subjects.registration("muster"), both());
    nc.publish(subjects.registration("eu"), both());
  }
  const first = await storeHas(r.store, "n1.example.net");
  nc.publish(subjects.registration("muster"), both());
  nc.publish(subjects.registration("muster"), both({ facts: { country: "fr" } }));
  await storeHas(r.store, "n1.example.net", (x) => x.facts["country"] === "fr");
  nc.publish(subjects.registration("eu"), both({ facts: { country: "fr" } }));
  nc.publish(subjects.registration("muster"), reg("marker.example.net"));
  await storeHas(r.store, "marker.example.net");
  await r.receiver.flush();
  const s = r.receiver.stats;
  assert.equal(s.accepted, 10);
  assert.equal(s.written, 3, `n1 twice (first data, changed data) and the marker: ${JSON.stringify(s)}`);
  assert.equal(s.merged + s.unchanged, 7);
  assert.ok(first.last_seen > 0);
});

test("nodes not heard within max_age expire, from the bucket and from queries; a node that keeps registering is still found", async (t) => {
  const r = await registry(t, { bucket: "expiry", collectives: ["muster"], max_age: 1, refresh: 0.2, flush_interval: 0.05 });
  assert.equal(r.store.expireAfterMs, 1200);
  const alive = generateFleet(1, "alive");
  const emu = await startEmulator({ nc, nodes: alive, collective: "muster", log: silentLogger, registration: { interval: 0.2, splay: false } });
  t.after(() => emu.stop());
  nc.publish(subjects.registration("muster"), reg("gone.example.net"));
  await storeHas(r.store, "gone.example.net");
  await storeHas(r.store, alive[0]!.identity);
  const source = new RegistrySource(nc, { bucket: "expiry", collective: "muster", via: "bucket" });
  const service = new RegistrySource(nc, { bucket: "expiry", collective: "muster", via: "service" });
  const opts = { timeoutMs: 5000, idleMs: 100 };
  assert.deepEqual((await source.discover(buildFilter({}), opts)).sort(), [alive[0]!.identity, "gone.example.net"]);

  await storeLoses(r.store, "gone.example.net", 10_000);
  const expiredAt = Date.now();
  // The node that keeps registering is found after that, by its next registration: whether one of
  // its earlier ones came too late on a loaded machine is timing, and the expiry rule itself is
  // registry/select.test.ts's (a record seen within the expiry stays, one past it goes).
  await storeHas(r.store, alive[0]!.identity, (rec) => rec.last_seen >= expiredAt);
  assert.deepEqual(await service.discover(buildFilter({}), opts), [alive[0]!.identity]);
  // the broker expires the key by the bucket's max_age too (no watch event: probe the bucket)
  await eventually(async () => ((await readRegistry(bucketsOn(nc), "expiry")).records.some((x) => x.identity === "gone.example.net") ? undefined : true), 10_000, "the broker expiring gone.example.net");
  await eventually(async () => ((await source.discover(buildFilter({}), opts)).join() === alive[0]!.identity ? true : undefined), 10_000, "the bucket holding the registering node alone");
});

test("the query subject validates untrusted requests", async (t) => {
  const r = await registry(t, { bucket: "queries", collectives: ["muster"] });
  nc.publish(subjects.registration("muster"), reg("q1.example.net"));
  await storeHas(r.store, "q1.example.net");
  const ask = async (body: string) => JSON.parse(new TextDecoder().decode((await nc.request(subjects.registryQuery("queries"), enc.encode(body), { timeout: 5000 })).data)) as Record<string, unknown>;
  const de = await ask(JSON.stringify({ filter: buildFilter({ fact: ["country=de"] }), collective: "muster" }));
  assert.deepEqual(de.identities, ["q1.example.net"]);
  assert.equal((de.status as { nodes: number }).nodes, 1, "the reply says how full the registry is");
  const elsewhere = await ask(JSON.stringify({ filter: buildFilter({}), collective: "elsewhere" }));
  assert.deepEqual(elsewhere.identities, []);
  assert.equal((elsewhere.status as { nodes: number }).nodes, 0);
  assert.equal((await ask("nope")).code, "bad_request");
  assert.equal((await ask(JSON.stringify({ filter: { fact: "x" } }))).code, "MUSTER_FILTER_INVALID");
  assert.equal((await ask(JSON.stringify({ filter: { ...buildFilter({}), extra: [] } }))).code, "MUSTER_FILTER_INVALID");
  assert.match(String((await ask(JSON.stringify({ filter: buildFilter({ select: ["provision().locked=false"] }) }))).error), /--dm broadcast/);
  // still serving
  assert.deepEqual((await ask(JSON.stringify({ filter: buildFilter({ identity: ["q1.example.net"] }) }))).identities, ["q1.example.net"]);
});

test("--dm registry without a registry bucket says what to do", async () => {
  const source = new RegistrySource(nc, { bucket: "never-created", collective: "muster" });
  await assert.rejects(source.discover(buildFilter({}), { timeoutMs: 500, idleMs: 100 }), (e: Error & { code?: string }) => e.code === "MUSTER_REGISTRY_UNAVAILABLE" && /muster registry serve/.test(e.message));
});

test("the config's max_age is the bucket's expiry, also for a bucket created with another", async (t) => {
  const first = await startRegistry(RegistryConfigSchema.parse({ bucket: "resize", max_age: 600 }), silentLogger, { nc });
  assert.equal(first.store.expireAfterMs, 660_000);
  await first.stop();
  const second = await registry(t, { bucket: "resize", max_age: 2, refresh: 0.5 });
  assert.equal(second.store.expireAfterMs, 2500);
  assert.equal((await readRegistry(bucketsOn(nc), "resize")).expireAfterMs, 2500);
});

test("registry config: defaults, and clear errors for bad values", async () => {
  const { loadRegistryConfig, timings } = await import("../../src/registry/config.js");
  const d = loadRegistryConfig(undefined);
  assert.deepEqual([d.bucket, d.collectives, d.max_age, d.http], ["muster-registry", ["muster"], 900, undefined]);
  assert.deepEqual(timings(d), { maxAgeMs: 900_000, refreshMs: 90_000, expireAfterMs: 990_000, flushMs: 250 });
  for (const bad of [{ bucket: "a.b" }, { max_age: -1 }, { refresh: 100, max_age: 10 }, { collectives: ["a b"] }, { http: { port: 70000 } }, { nosuch: 1 }]) {
    assert.equal(RegistryConfigSchema.safeParse(bad).success, false, JSON.stringify(bad));
  }
});

test("a registry started after the nodes asks them to register now: it holds them all long before their hourly registration", async (t) => {
  // Nodes registering once an hour, first at a random point of it: without the registry asking,
  // next to none would be heard within the minute below (a deadline that only catches the hour).
  const fleet = generateFleet(30, "late");
  const emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, registration: { interval: 3600, splay: true } });
  t.after(() => emu.stop());
  const r = await registry(t, { bucket: "fill", collectives: ["muster"], flush_interval: 0.05 });
  await Promise.all(fleet.map((n) => storeHas(r.store, n.identity, () => true, 60_000)));
  assert.equal(r.store.status("muster").nodes, fleet.length);
});

test("with fill_on_start off, the registry publishes no solicitation", async (t) => {
  const seen: string[] = [];
  const sub = nc.subscribe(subjects.registrationSolicit("quiet"), { callback: (_e, m) => void seen.push(m.subject) });
  const loud = nc.subscribe(subjects.registrationSolicit("loud"), { callback: (_e, m) => void seen.push(m.subject) });
  t.after(() => (sub.unsubscribe(), loud.unsubscribe()));
  await nc.flush();
  await registry(t, { bucket: "quiet", collectives: ["quiet"], fill_on_start: false });
  await registry(t, { bucket: "loud", collectives: ["loud"] });
  // one publisher, ordered delivery: the second registry's solicitation arriving means the first's would have
  await eventually(async () => (seen.length > 0 ? true : undefined), 5000, "the loud registry's solicitation");
  assert.deepEqual(seen, [subjects.registrationSolicit("loud")]);
});

test("--dm registry says when the registry is empty, still filling or stale", async (t) => {
  const r = await registry(t, { bucket: "health", collectives: ["muster"], max_age: 900, flush_interval: 0.05 });
  const warnings: string[] = [];
  const viaBucket = new RegistrySource(nc, { bucket: "health", collective: "muster", via: "bucket", onWarning: (m) => warnings.push(m) });
  const viaService = new RegistrySource(nc, { bucket: "health", collective: "muster", via: "service", onWarning: (m) => warnings.push(m) });
  const opts = { timeoutMs: 5000, idleMs: 100 };
  assert.deepEqual(await viaBucket.discover(buildFilter({}), opts), []);
  assert.match(viaBucket.lastWarning ?? "", /holds no current nodes, so nothing can match.*--dm broadcast/);
  assert.deepEqual(await viaService.discover(buildFilter({}), opts), []);
  assert.match(viaService.lastWarning ?? "", /started \d+ s ago and is still filling|holds no current nodes/);
  assert.equal(warnings.length, 2);

  // one node last heard 10 minutes ago: current (max_age 900 s) but the registry hears nobody
  const { keyFor, encodeRecord } = await import("../../src/registry/record.js");
  const old = { identity: "old.example.net", facts: { country: "de" }, classes: [], agents: [], collectives: ["muster"], last_seen: Date.now() - 600_000 };
  await r.store.kv.put(keyFor(old.identity), encodeRecord(old));
  await storeHas(r.store, old.identity);
  assert.deepEqual(await viaBucket.discover(buildFilter({ fact: ["country=de"] }), opts), [old.identity]);
  assert.match(viaBucket.lastWarning ?? "", /is stale: its newest registration is 6\d\d s old/);

  // a fresh registration: nothing to say
  nc.publish(subjects.registration("muster"), reg("fresh.example.net"));
  await storeHas(r.store, "fresh.example.net");
  assert.deepEqual(await viaBucket.discover(buildFilter({ fact: ["country=de"] }), opts), [old.identity, "fresh.example.net"].sort());
  assert.equal(viaBucket.lastWarning, undefined);
});

test("HTTP with http.token_file: 401 without the bearer token, /healthz stays open", async (t) => {
  const { mkdtempSync, writeFileSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "muster-registry-token-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "token");
  writeFileSync(tokenFile, "s3cret-token-0123456789abcdef\n");
  const r = await registry(t, { bucket: "authed", collectives: ["muster"], http: { host: "127.0.0.1", port: 0, token_file: tokenFile } });
  nc.publish(subjects.registration("muster"), reg("h1.example.net"));
  await storeHas(r.store, "h1.example.net");
  const get = (path: string, auth?: string) => fetch(`${r.httpAddress}${path}`, auth ? { headers: { authorization: auth } } : {});
  const none = await get("/nodes");
  assert.equal(none.status, 401);
  assert.match(((await none.json()) as { message: string }).message, /Authorization: Bearer/);
  assert.equal((await get("/nodes", "Bearer wrong-token-0123456789")).status, 401);
  assert.equal((await get("/nodes/h1.example.net", "Basic czNjcmV0")).status, 401);
  assert.equal((await get("/metrics")).status, 401);
  assert.equal((await get("/healthz")).status, 200);
  const ok = await get(`/nodes?with=${encodeURIComponent("country=de")}`, "Bearer s3cret-token-0123456789abcdef");
  assert.equal(ok.status, 200);
  const body = (await ok.json()) as { count: number; nodes: { identity: string }[]; registry: { nodes: number } };
  assert.deepEqual(body.nodes.map((n) => n.identity), ["h1.example.net"]);
  assert.equal(body.registry.nodes, 1);

  // a token file that is missing or too short is a config error, before anything is served
  writeFileSync(join(dir, "short"), "abc\n");
  for (const f of [join(dir, "short"), join(dir, "missing")]) {
    await assert.rejects(startRegistry(RegistryConfigSchema.parse({ bucket: "authed", http: { host: "127.0.0.1", port: 0, token_file: f } }), silentLogger, { nc }), (e: Error & { code?: string }) => e.code === "MUSTER_CONFIG_INVALID" && e.message.includes(f));
  }
  // off loopback only with a token
  const open = RegistryConfigSchema.safeParse({ http: { host: "0.0.0.0", port: 8089 } });
  assert.equal(open.success, false);
  assert.match(JSON.stringify(open.error?.issues), /token_file/);
  assert.equal(RegistryConfigSchema.safeParse({ http: { host: "0.0.0.0", port: 8089, token_file: tokenFile } }).success, true);
});
