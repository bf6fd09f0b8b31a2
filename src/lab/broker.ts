import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { authorizationConfig, type BrokerAuthSpec } from "../broker/auth.js";
import type { TlsSettings } from "../broker/connect.js";
import { MusterClient } from "../client/client.js";
import { MusterError } from "../errors.js";
import { signingKeyFromPem } from "../protocol/signing.js";
import { clientCaBundle, type LabPki } from "./credentials.js";
import { LAB_COLLECTIVE, LAB_NOTIFIER, LAB_PROVISIONER_CALLER, LAB_PROVISIONING_COLLECTIVE } from "./names.js";
import type { StartNatsOptions } from "./nats.js";
import { labBrokers, type LabState } from "./state.js";

// The lab's broker: nats-server with JetStream and TLS, every connection a user with its own
// permissions (docs/security.md). The users live in a file of their own, rewritten as nodes come
// and go and read again on a reload; its monitoring port says which user each connection is.

/**
 * The lab's users: services by subject with OU=service (no Puppet certificate can carry one), nodes
 * by their Puppet certname, and each node's own bootstrap credential (OU=bootstrap), confined to its
 * provisioning subject. The notifier may keep its dedupe keys in KV.
 */
export function labBrokerSpec(nodes: string[], servicesNodes: string[]): BrokerAuthSpec {
  return {
    collectives: [LAB_COLLECTIVE],
    provisioning_collective: LAB_PROVISIONING_COLLECTIVE,
    nodes: [...nodes.map((identity) => ({ identity })), ...servicesNodes.map((identity) => ({ identity, users: [labNodeUser(identity)], ...(identity === LAB_NOTIFIER ? { notifier: true } : {}) }))],
    bootstrap: nodes.map((identity) => ({ identity })),
    provisioners: [serviceUser("provisioner")],
    admins: [serviceUser("admin")],
    registries: [serviceUser("registry")],
  };
}

const serviceUser = (name: string) => `CN=${name},OU=service,O=muster`;
const labNodeUser = (identity: string) => `CN=${identity},OU=node,O=muster`;

/** The nats-server include file holding the lab's users (rewritten as nodes come and go). */
const AUTHORIZATION_FILE = "authorization.conf";

export function writeLabAuthorization(dir: string, nodes: string[], services: string[]): void {
  mkdirSync(join(dir, "nats"), { recursive: true });
  writeFileSync(join(dir, "nats", AUTHORIZATION_FILE), authorizationConfig(labBrokerSpec(nodes, services)));
}

/** How the lab starts its nats-server: its state under <lab>/nats, client certificates mapped to users, monitoring on loopback. */
export function labNatsOptions(dir: string, pki: LabPki, monitorPort: number, detached: boolean): StartNatsOptions {
  return {
    dir: join(dir, "nats"),
    detached,
    tls: { ...pki.nats, ca: clientCaBundle(dir), clients: "map" },
    config: `http: "127.0.0.1:${monitorPort}"\ninclude "${AUTHORIZATION_FILE}"\n`,
  };
}

/** The environment of a process acting as the lab's operator (the receiver, commands run for the operator). */
export function operatorEnv(broker: string, ca: string, admin: TlsSettings): Record<string, string> {
  return { MUSTER_BROKER: broker, MUSTER_TLS_CA: ca, MUSTER_TLS_CERT: admin.cert!, MUSTER_TLS_KEY: admin.key! };
}

/** The lab's service identities (broker users that stay whatever nodes do). */
export function labServices(s: LabState): string[] {
  return s.services ?? [s.notifier.identity, ...s.masters.map((m) => m.identity)];
}

/**
 * Give nats-server the users of exactly these nodes and wait until it has reloaded (its monitoring
 * reports a new config load time): a node started before that would be refused.
 */
export async function reloadBrokerUsers(s: LabState, nodes: string[]): Promise<void> {
  writeLabAuthorization(s.dir, nodes, labServices(s));
  const loadTime = async () => {
    try {
      const res = await fetch(`${s.monitor}/varz`, { signal: AbortSignal.timeout(3000) });
      return String(((await res.json()) as { config_load_time?: string }).config_load_time ?? "");
    } catch {
      return "";
    }
  };
  const before = await loadTime();
  process.kill(s.natsPid, "SIGHUP");
  const deadline = Date.now() + 15_000;
  for (;;) {
    const now = await loadTime();
    if (now && now !== before) return;
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `nats-server did not reload its users within 15 s (see ${join(s.dir, "nats", "nats.log")})`);
    await new Promise((r) => setTimeout(r, 100)); // nats-server announces a reload nowhere we can subscribe to
  }
}

/**
 * Connection name -> the broker user its certificate mapped to, from nats-server's monitoring
 * endpoint (`connz?auth=true`). Empty when monitoring does not answer.
 */
export async function connectedUsers(monitor: string): Promise<Map<string, string>> {
  try {
    const res = await fetch(`${monitor}/connz?auth=true&limit=4096`, { signal: AbortSignal.timeout(3000) });
    const body = (await res.json()) as { connections?: { name?: string; authorized_user?: string }[] };
    return new Map((body.connections ?? []).filter((c) => c.name && c.authorized_user).map((c) => [c.name!, c.authorized_user!]));
  } catch {
    return new Map();
  }
}

/** A client acting as the provisioner: its credential, its key, the provisioning collective. */
export async function labProvisionerClient(s: Pick<LabState, "broker" | "site" | "provisioningCollective" | "tls" | "provisionerEnv">, name = "muster-lab-provisioner"): Promise<MusterClient> {
  const home = s.provisionerEnv.MUSTER_CONFIG_DIR!;
  const key = signingKeyFromPem(LAB_PROVISIONER_CALLER, readFileSync(join(home, "keys", `${LAB_PROVISIONER_CALLER}.pem`), "utf8"));
  return MusterClient.connect({ brokers: labBrokers(s), collective: s.provisioningCollective, name, tls: s.tls.provisioner, key });
}
