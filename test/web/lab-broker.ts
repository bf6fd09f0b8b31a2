import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection, NodeConnectionOptions } from "@nats-io/transport-node";
import { bootstrapPermissions, brokerUsers, nodePermissions, type BrokerUser, type Permissions } from "../../src/broker/auth.js";
import { labBrokerSpec } from "../../src/lab/lab.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { freePort } from "../../src/lab/ports.js";
import { ensureCA, issueCert, type CA } from "../../src/security/pki.js";
import { cleanEnv, connectNats } from "../support/collective.js";

// A broker with the lab's users and permissions (src/lab/lab.ts labBrokerSpec, src/broker/auth.ts),
// for the console's tests: TLS with verify_and_map, so each process is the broker user its
// certificate names, as in `muster lab up`. The console and the CLI connect as the lab's admin, the
// registry as its registry user, the provisioner as its provisioner. A permission the console needs
// and the lab does not grant fails these tests, as it fails the lab.
//
// Emulated nodes share one connection (one process hosts them all), so the emulator's user holds the
// union of the permissions each hosted node has as its own user in the lab: node permissions in the
// fleet's collective, bootstrap permissions (one node's subject each) for waiting nodes. Two things
// follow from sharing: the emulator subscribes to its nodes' direct subjects with one wildcard, and
// a broadcast reaching the one connection is answered once per hosted node (allow_responses up to
// the number of nodes, where each node's own connection answers once).

export type LabRole = "admin" | "provisioner" | "registry";

export interface LabBroker {
  readonly nats: NatsHandle;
  url: string;
  /** A role's TLS files (the lab's service certificates: OU=service, O=muster). */
  tls(role: LabRole | "emulator"): { ca: string; cert: string; key: string };
  /** An environment for a muster child process connecting as `role`. */
  env(role: LabRole, configDir: string): NodeJS.ProcessEnv;
  /** A raw NATS connection as `role`. */
  connect(role: LabRole | "emulator", name?: string, opts?: NodeConnectionOptions): Promise<NatsConnection>;
  /** The broker's permission violations so far (its log's "Publish/Subscription Violation" lines). */
  violations(): string[];
  stop(): Promise<void>;
  /** Starts the broker again after stop(): the same port, users and JetStream store. */
  start(): Promise<void>;
}

function union(perms: Permissions[]): Permissions {
  const pub = new Set<string>();
  const sub = new Set<string>();
  for (const p of perms) {
    for (const s of p.publish.allow) pub.add(s);
    for (const s of p.subscribe.allow) sub.add(s);
  }
  return { publish: { allow: [...pub] }, subscribe: { allow: [...sub] }, allow_responses: perms.some((p) => p.allow_responses) };
}

export interface LabBrokerOptions {
  dir: string;
  /** Provisioned nodes the emulator hosts (node permissions in the lab's collective). */
  nodes?: string[];
  /** Waiting nodes the emulator hosts in the provisioning collective (each node's bootstrap permissions). */
  waiting?: string[];
  port?: number;
}

export async function startLabBroker(o: LabBrokerOptions): Promise<LabBroker> {
  const ca: CA = ensureCA(join(o.dir, "lab-ca"), "/O=muster/CN=muster lab CA");
  const cert = (name: string, ou: string) => ({ ca: ca.cert, ...issueCert(ca, { name, subject: `/O=muster/OU=${ou}/CN=${name}`, usage: "client" }) });
  const files = { admin: cert("admin", "service"), provisioner: cert("provisioner", "service"), registry: cert("registry", "service"), emulator: cert("emulator", "emulator") };
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/OU=broker/CN=nats.lab", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  const spec = labBrokerSpec([], []);
  const emulator: BrokerUser = {
    user: "CN=emulator,OU=emulator,O=muster",
    permissions: union([...(o.nodes ?? []).map((id) => nodePermissions(id, spec.collectives!)), ...(o.waiting ?? []).map((id) => bootstrapPermissions(spec.provisioning_collective!, id))]),
  };
  const hosted = (o.nodes?.length ?? 0) + (o.waiting?.length ?? 0);
  if (o.nodes?.length) emulator.permissions.subscribe.allow.push(...spec.collectives!.map((c) => `${c}.node.>`));
  if (o.waiting?.length) emulator.permissions.subscribe.allow.push(`${spec.provisioning_collective!}.node.>`);
  (emulator.permissions as unknown as { allow_responses: unknown }).allow_responses = { max: Math.max(1, hosted) };
  const users = [...brokerUsers(spec), emulator].map((u) => `    ${JSON.stringify(u)}`);
  const logFile = join(o.dir, "nats-server.log");
  const config = `log_file: ${JSON.stringify(logFile)}\nauthorization {\n  users = [\n${users.join("\n")}\n  ]\n}\n`;
  const port = o.port ?? (await freePort());
  const launch = () => startNats({ dir: join(o.dir, "nats"), jetstream: true, port, tls: { ...server, ca: ca.cert, clients: "map" }, config });
  let nats = await launch();
  const tls = (role: LabRole | "emulator") => ({ ca: files[role].ca, cert: files[role].cert!, key: files[role].key! });
  return {
    get nats() {
      return nats;
    },
    url: nats.url,
    tls,
    env: (role, configDir) => {
      const t = tls(role);
      return cleanEnv(configDir, { MUSTER_TLS_CA: t.ca, MUSTER_TLS_CERT: t.cert, MUSTER_TLS_KEY: t.key });
    },
    connect: (role, name = `lab-${role}`, opts = {}) => {
      const t = tls(role);
      return connectNats(nats.url, { name, ...opts, tls: { ca: readFileSync(t.ca, "utf8"), cert: readFileSync(t.cert, "utf8"), key: readFileSync(t.key, "utf8") } });
    },
    violations: () => {
      try {
        return readFileSync(logFile, "utf8").split("\n").filter((l) => /Violation/.test(l));
      } catch {
        return [];
      }
    },
    stop: () => nats.stop(),
    start: async () => {
      nats = await launch();
    },
  };
}
