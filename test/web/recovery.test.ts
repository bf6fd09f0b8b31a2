import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { silentLogger } from "../../src/log.js";
import { newRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { loadRegistryConfig } from "../../src/registry/config.js";
import { startRegistry, type RunningRegistry } from "../../src/registry/daemon.js";
import { MusterClient } from "../../src/client/client.js";
import { fleetSources } from "../../src/fleet/sources.js";
import { ConsoleBackend } from "../../src/web/backend.js";
import { WebConfigSchema } from "../../src/web/config.js";
import { startWeb, type WebHandle } from "../../src/web/daemon.js";
import { connectNats, spawnMuster } from "../support/collective.js";
import { freePort, startNats, type NatsHandle } from "../support/index.js";
import { bearer, openSse } from "./support.js";

// The broker and the registry go away and come back: /api/status and the event stream say which
// is down and why, and the board follows the state bucket again once the broker is back.

const BUCKET = "muster_provision_recovery";
const TOKEN = "viewer-token-0123456789abcdefgh";
let dir: string;
let natsDir: string;
let natsPort: number;
let nats: NatsHandle;
let registry: RunningRegistry | undefined;
let regCfgPath: string;
let web: WebHandle;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-web-recovery-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  natsDir = join(dir, "nats");
  natsPort = await freePort();
  nats = await startNats({ jetstream: true, dir: natsDir, port: natsPort });
  const nc = await connectNats(nats.url);
  await (await ProvisionState.open(bucketsOn(nc), BUCKET)).put({ ...newRecord("one.test"), status: "pending" });
  await nc.drain();
  const regPort = await freePort();
  regCfgPath = join(dir, "registry.yaml");
  writeFileSync(regCfgPath, `http:\n  host: 127.0.0.1\n  port: ${regPort}\nfill_on_start: false\n`);
  registry = await startRegistry(loadRegistryConfig(regCfgPath), silentLogger, { broker: nats.url });
  writeFileSync(join(dir, "tokens"), `${TOKEN} viewer bob\n`);
  const cfg = WebConfigSchema.parse({ listen: `127.0.0.1:${await freePort()}`, auth: { tokens_file: join(dir, "tokens") }, registry: { url: `http://127.0.0.1:${regPort}` }, state_bucket: BUCKET });
  web = await startWeb(cfg, silentLogger, { broker: nats.url, probeMs: 300 });
});

after(async () => {
  await web?.stop();
  await registry?.stop();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

type H = { broker: { ok: boolean; error?: string }; registry: { ok: boolean; error?: string } };

test("broker and registry down are named on /api/status and the stream; both recover by themselves", async () => {
  const sse = await openSse(`${web.url}/api/board/events`, bearer(TOKEN));
  try {
    const since = () => sse.events.length;
    const healthAfter = (from: number, pred: (h: H) => boolean, what: string) => sse.next((e) => sse.events.indexOf(e) >= from && e.event === "status" && pred(e.data as H), 30_000, what);
    await healthAfter(0, (h) => h.broker.ok && h.registry.ok, "all up");
    await sse.next((e) => e.event === "snapshot" && (e.data as { nodes: { identity: string }[] }).nodes.some((n) => n.identity === "one.test"), 10_000, "snapshot with one.test");

    let mark = since();
    await registry!.stop();
    registry = undefined;
    const regDown = await healthAfter(mark, (h) => !h.registry.ok, "registry down");
    assert.match((regDown.data as H).registry.error!, /registry at http:\/\/127\.0\.0\.1:\d+ is unreachable/);
    const explorer = await fetch(`${web.url}/api/nodes`, { headers: bearer(TOKEN) });
    assert.equal(explorer.status, 503);
    assert.equal(((await explorer.json()) as { error: { code: string } }).error.code, "registry");

    mark = since();
    await nats.stop();
    const brokerDown = await healthAfter(mark, (h) => !h.broker.ok, "broker down");
    assert.match((brokerDown.data as H).broker.error!, /broker/);
    const h = (await (await fetch(`${web.url}/api/status`, { headers: bearer(TOKEN) })).json()) as H;
    assert.equal(h.broker.ok, false);

    mark = since();
    nats = await startNats({ jetstream: true, dir: natsDir, port: natsPort });
    registry = await startRegistry(loadRegistryConfig(regCfgPath), silentLogger, { broker: nats.url });
    await healthAfter(mark, (h) => h.broker.ok && h.registry.ok, "all back");
    // the board follows the bucket again: a record written after the restart arrives
    const nc: NatsConnection = await connectNats(nats.url);
    try {
      await (await ProvisionState.open(bucketsOn(nc), BUCKET)).put({ ...newRecord("two.test"), status: "pending" });
    } finally {
      await nc.drain();
    }
    await sse.next((e) => sse.events.indexOf(e) >= mark && (e.event === "node" ? (e.data as { identity: string }).identity === "two.test" : e.event === "snapshot" && (e.data as { nodes: { identity: string }[] }).nodes.some((n) => n.identity === "two.test")), 20_000, "two.test after the restart");
    assert.equal((await fetch(`${web.url}/api/nodes`, { headers: bearer(TOKEN) })).status, 200);
  } finally {
    sse.close();
  }
});

test("muster web stops on SIGTERM while its broker is away (it does not wait for the broker to drain)", async () => {
  const port = await freePort();
  const bport = await freePort();
  const bdir = join(dir, "nats-gone");
  const broker = await startNats({ jetstream: true, dir: bdir, port: bport });
  writeFileSync(join(dir, "tokens"), `${TOKEN} viewer bob\n`);
  writeFileSync(join(dir, "web.yaml"), `listen: 127.0.0.1:${port}\nauth: {tokens_file: ${join(dir, "tokens")}}\nregistry: {url: "http://127.0.0.1:${await freePort()}"}\n`);
  const p = spawnMuster(["web", "--config", join(dir, "web.yaml"), "--broker", broker.url], { env: { ...process.env, MUSTER_CONFIG_DIR: join(dir, "keys") } });
  try {
    await p.waitForLine(/ready/, 30_000);
    // connected: /api/status says the broker is up
    for (const deadline = Date.now() + 20_000; ; ) {
      const h = (await (await fetch(`http://127.0.0.1:${port}/api/status`, { headers: bearer(TOKEN) })).json()) as H;
      if (h.broker.ok) break;
      assert.ok(Date.now() < deadline, `never connected: ${JSON.stringify(h)}`);
      await new Promise((r) => setTimeout(r, 100)); // re-probe interval
    }
    await broker.stop();
    p.child.kill("SIGTERM");
    const ended = await Promise.race([p.exited, new Promise<"hung">((r) => setTimeout(() => r("hung"), 15_000))]);
    assert.notEqual(ended, "hung", "muster web still running 15 s after SIGTERM with its broker gone");
    assert.deepEqual(ended, { code: 0, signal: null });
  } finally {
    await p.stop(1000);
  }
});

test("a follow still under way when the console stops ends quietly: no rejection, nothing left following", async () => {
  const cfg = WebConfigSchema.parse({ auth: { tokens_file: join(dir, "tokens") }, state_bucket: BUCKET });
  const broker = await startNats({ jetstream: true, dir: join(dir, "nats-follow"), port: await freePort() });
  const backend = new ConsoleBackend(cfg, silentLogger, { brokerWhere: broker.url });
  const client = await MusterClient.connect({ brokers: [broker.url], persistent: true }).catch(async (e: unknown) => {
    await broker.stop();
    throw e;
  });
  try {
    backend.attach(client, fleetSources(client, { stateBucket: BUCKET }));
    // what SIGTERM does while the broker is away: the follow started when the broker came back is
    // still waiting on it when the console stops and closes its client
    await broker.stop();
    const following = backend.follow();
    await backend.stop();
    await client.close();
    await assert.doesNotReject(following);
  } finally {
    await client.close();
    await broker.stop();
  }
});
