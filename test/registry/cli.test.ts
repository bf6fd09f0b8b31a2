import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { generateFleet } from "../../src/emulator/fleet.js";
import { waitRegistered } from "../support/registry.js";
import { cleanEnv, connectNats, runCli, spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// The registry through the real `muster` binary: `muster emulate` nodes registering, `muster registry
// serve` storing, and `muster find --dm registry`, `muster registry query`, HTTP answering.

const tmp = tempDir("registry-cli");
const env = cleanEnv(join(tmp.path, "config"));
let nats: NatsHandle;
let nc: NatsConnection;
let registry: MusterProcess;
let emulators: MusterProcess[] = [];
let http = "";

// A fleet with some variety beyond generateFleet: a node with its own agents list and class names
// with ::, one in two collectives.
const fleet = [
  ...generateFleet(40).map((n) => ({ ...n, agents: [] as string[] })),
  { identity: "odd.example.net", facts: { country: "de", os: { family: "RedHat", release: { major: "9" } }, tags: ["blue", "green"], memorysize_mb: 512 }, classes: ["apache::mod::ssl", "base"], agents: ["rpcutil", "discovery"] },
];
const euFleet = [{ identity: "eu-only.example.net", facts: { country: "nl" }, classes: ["base"], agents: [] as string[] }];

function registered(identities: string[], bucket = "muster-registry", timeoutMs = 20_000): Promise<void> {
  return waitRegistered(nc, identities, { bucket, timeoutMs });
}

before(async () => {
  nats = await startNats();
  nc = await connectNats(nats.url);
  const cfg = join(tmp.path, "registry.yaml");
  writeFileSync(cfg, toYaml({ broker: nats.url, collectives: ["muster", "eu"], max_age: 300, http: { host: "127.0.0.1", port: 0 }, log: { level: "warn" } }));
  registry = spawnMuster(["registry", "serve", "--config", cfg], { env });
  const line = await registry.waitForLine(/ready/, 20_000);
  http = /http (http:\/\/[0-9.]+:\d+)/.exec(line)![1]!;
  const fleetFile = join(tmp.path, "fleet.yaml");
  writeFileSync(fleetFile, toYaml({ nodes: fleet }));
  const euFile = join(tmp.path, "eu.yaml");
  writeFileSync(euFile, toYaml({ nodes: euFleet.map((n) => ({ ...n, collectives: ["eu"] })) }));
  emulators = [spawnMuster(["emulate", "--fleet", fleetFile, "--broker", nats.url, "--registration", "1"], { env }), spawnMuster(["emulate", "--fleet", euFile, "--broker", nats.url, "-T", "eu", "--registration", "1"], { env })];
  await Promise.all(emulators.map((e) => e.waitForLine(/ready/, 30_000)));
  await registered([...fleet, ...euFleet].map((n) => n.identity));
});

after(async () => {
  await Promise.all(emulators.map((e) => e.stop()));
  await registry?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  tmp.remove();
});

const muster = (args: string[]) => runCli([...args, "--broker", nats.url], { env });

test("muster find --dm registry equals broadcast discovery, every filter kind", async () => {
  const filters: string[][] = [
    [],
    ["-F", "country=de"],
    ["-F", "memorysize_mb>=8192", "-C", "web"],
    ["-C", "apache::mod::ssl"],
    ["-I", "/0001/", "-I", "odd.example.net"],
    ["-A", "rpcutil"],
    ["-W", "db country=uk"],
    ["-S", "(country=de or country=uk) and not web and processorcount>3"],
    ["-S", "tags=green or fact('os.family').value=RedHat"],
    ["-S", "agent('rpcutil').present=true and environment=staging"],
  ];
  const compare = async (f: string[]) => {
    const [broadcast, viaRegistry] = await Promise.all([muster(["find", ...f, "--json"]), muster(["find", "--dm", "registry", ...f, "--json"])]);
    assert.equal(broadcast.code, 0, `${f.join(" ")}: ${broadcast.stderr}`);
    assert.equal(viaRegistry.code, 0, `${f.join(" ")}: ${viaRegistry.stderr}`);
    assert.deepEqual(JSON.parse(viaRegistry.stdout), JSON.parse(broadcast.stdout), f.join(" "));
  };
  for (let i = 0; i < filters.length; i += 3) await Promise.all(filters.slice(i, i + 3).map(compare)); // a few at a time: quicker, and broadcast still gets the cores it needs
  const eu = await muster(["find", "--dm", "registry", "-T", "eu"]);
  assert.equal(eu.stdout, "eu-only.example.net\n");
  const none = await muster(["find", "--dm", "registry", "-F", "country=nowhere"]);
  assert.equal(none.code, 1);
  assert.equal(none.stdout, "");
});

test("a call discovered through the registry reaches the nodes", async () => {
  const r = await muster(["ping", "--dm", "registry", "-F", "country=fr"]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.split("\n").filter((l) => /example\.net/.test(l)).length, fleet.filter((n) => n.facts.country === "fr").length);
});

test("--dm registry refuses data plugins it cannot answer, before sending anything", async () => {
  const r = await muster(["find", "--dm", "registry", "-S", "web and provision().locked=false"]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /provision\(\) runs on the node.*--dm broadcast/);
  const bucket = await runCli(["find", "--dm", "registry", "--broker", nats.url, "--config", writeConfig({ registry_bucket: "nosuch" })], { env });
  assert.equal(bucket.code, 1);
  assert.match(bucket.stderr, /registry bucket 'nosuch'.*muster registry serve/);
});

function writeConfig(c: Record<string, unknown>): string {
  const p = join(tmp.path, `client-${Object.values(c).join("-")}.yaml`);
  writeFileSync(p, toYaml(c));
  return p;
}

test("muster registry query: a table, or --json with full metadata", async () => {
  const table = await muster(["registry", "query", "-F", "country=de", "-C", "base", "-I", "/000(0[1-9]|1[0-9])/"]);
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trim().split("\n");
  // STORED, not "last seen": the bucket holds when the registry last wrote the record
  assert.match(lines[0]!, /^IDENTITY\s+STORED\s+IPADDRESS\s+OS\.FAMILY\s+OS\.RELEASE\.MAJOR\s+COUNTRY$/);
  const expected = fleet.filter((n) => n.facts.country === "de" && /000(0[1-9]|1[0-9])/.test(n.identity)).map((n) => n.identity);
  assert.deepEqual(lines.slice(1, -3).map((l) => l.split(/\s+/)[0]), expected);
  assert.match(lines[1]!, /\d+s ago\s+127\.\S+\s+Debian\s+12\s+de$/);
  assert.equal(lines.at(-2), `${expected.length} nodes`);
  assert.match(lines.at(-1)!, /^STORED: when the registry last wrote the node's record\. A registration that changes nothing is written only once the record is `refresh` old/);

  const json = await muster(["registry", "query", "-I", "odd.example.net", "--json"]);
  assert.equal(json.code, 0, json.stderr);
  const [odd, ...rest] = JSON.parse(json.stdout) as Record<string, unknown>[];
  assert.equal(rest.length, 0);
  assert.deepEqual(odd!.facts, fleet.at(-1)!.facts);
  assert.deepEqual(odd!.classes, ["apache::mod::ssl", "base"]);
  assert.deepEqual(odd!.agents, ["discovery", "rpcutil"]);
  assert.deepEqual(odd!.collectives, ["muster"]);
  assert.equal(typeof odd!.last_seen, "number");
  assert.equal(typeof odd!.age_seconds, "number");

  const cols = await muster(["registry", "query", "-I", "odd.example.net", "--facts", "tags,memorysize_mb,nosuch"]);
  assert.match(cols.stdout, /odd\.example\.net\s+\d+s ago\s+\["blue","green"\]\s+512\s+-\n/);
  const none = await muster(["registry", "query", "-F", "country=nowhere"]);
  assert.equal(none.code, 1);
  const bad = await muster(["registry", "query", "-S", "country="]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /-S: expected a value/);
});

test("HTTP: /nodes with the filter language, /nodes/<identity>, /healthz, /metrics", async () => {
  const get = async (path: string) => {
    const r = await fetch(`${http}${path}`);
    return { status: r.status, body: (r.headers.get("content-type") ?? "").includes("json") ? ((await r.json()) as Record<string, unknown>) : await r.text() };
  };
  const de = await get(`/nodes?fact=${encodeURIComponent("country=de")}&class=base`);
  assert.equal(de.status, 200);
  const body = de.body as { count: number; nodes: { identity: string; facts: Record<string, unknown> }[] };
  const want = fleet.filter((n) => n.facts.country === "de").map((n) => n.identity).sort();
  assert.equal(body.count, want.length);
  assert.deepEqual(body.nodes.map((n) => n.identity), want);
  assert.ok(body.nodes.every((n) => n.facts.country === "de"));

  const compound = await get(`/nodes?select=${encodeURIComponent("tags=blue or (db and country=uk)")}&identity=${encodeURIComponent("/odd|000[0-3]/")}`);
  const compoundWant = fleet.filter((n) => /odd|000[0-3]/.test(n.identity) && ((n.facts as { tags?: string[] }).tags?.includes("blue") || (n.classes.includes("db") && n.facts.country === "uk"))).map((n) => n.identity).sort();
  assert.ok(compoundWant.length >= 2);
  assert.deepEqual((compound.body as { nodes: { identity: string }[] }).nodes.map((n) => n.identity), compoundWant);
  const eu = await get("/nodes?collective=eu");
  assert.deepEqual((eu.body as { nodes: { identity: string }[] }).nodes.map((n) => n.identity), ["eu-only.example.net"]);

  const bad = await get(`/nodes?select=${encodeURIComponent("(web")}`);
  assert.equal(bad.status, 400);
  assert.equal((bad.body as { error: string }).error, "MUSTER_FILTER_INVALID");
  const plugin = await get(`/nodes?select=${encodeURIComponent("provision().locked=false")}`);
  assert.equal(plugin.status, 400);
  const unknown = await get("/nodes?eval=process.exit()");
  assert.equal(unknown.status, 400);
  assert.match((unknown.body as { message: string }).message, /unknown parameter "eval"/);

  const one = await get("/nodes/odd.example.net");
  assert.equal(one.status, 200);
  assert.equal((one.body as { identity: string }).identity, "odd.example.net");
  assert.equal((await get("/nodes/nosuch.example.net")).status, 404);

  const health = await get("/healthz");
  assert.equal(health.status, 200);
  const h = health.body as { ok: boolean; nodes: number; accepted: number };
  assert.equal(h.ok, true);
  assert.equal(h.nodes, fleet.length + euFleet.length);
  assert.ok(h.accepted >= h.nodes);
  const metrics = await get("/metrics");
  assert.match(metrics.body as string, /muster_registry_nodes \d+/);
  assert.match(metrics.body as string, /muster_registry_registrations_rejected_total\{reason="garbled"\} 0/);
});

test("--dm registry against a collective nobody registers in says so on stderr", async () => {
  const r = await muster(["find", "--dm", "registry", "-T", "nobody"]);
  assert.equal(r.code, 1, r.stderr);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /warning: the registry \(bucket muster-registry, collective nobody\) (holds no current nodes|started \d+ s ago and is still filling)/);
  const q = await muster(["registry", "query", "-T", "nobody"]);
  assert.match(q.stderr, /warning: the registry .* holds no current nodes/);
  // a populated collective: no warning
  const de = await muster(["find", "--dm", "registry", "-F", "country=de"]);
  assert.equal(de.code, 0);
  assert.doesNotMatch(de.stderr, /warning/);
});

test("muster registry --help explains serve and query", async () => {
  const r = await runCli(["registry", "--help"], { env });
  assert.equal(r.code, 0);
  assert.match(r.stdout, /serve/);
  assert.match(r.stdout, /query/);
  assert.match(r.stdout, /--dm registry/);
  const q = await runCli(["registry", "query", "--help"], { env });
  assert.match(q.stdout, /-S, --select/);
  assert.doesNotMatch(q.stdout, /--dm/);
});
