import { z } from "zod";
import { MusterError } from "../errors.js";
import { DEFAULT_ALIVE_BUCKET, DEFAULT_NODE_KEYS_BUCKET, DEFAULT_NOTIFY_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_REGISTRY_BUCKET, DEFAULT_SERVICES_BUCKET, DEFAULT_STATE_BUCKET, kvStreamName } from "../protocol/buckets.js";
import { RUNALL_AGENT } from "../protocol/events.js";
import { heartbeatSubject } from "../protocol/heartbeat.js";
import { puppetRunSubject } from "../protocol/puppet-run.js";
import { serviceRoleSubjects } from "../protocol/service.js";
import { isValidCollective, isValidIdentity, subjects } from "../protocol/subjects.js";
import { inboxPrefixFor } from "./connect.js";

// nats-server users and permissions for a muster fleet (docs/security.md#nats-users-and-permissions).
// Pure: a description of who connects in, nats-server `authorization` text out. Users are named as
// nats-server's `verify_and_map` names a client certificate: its subject in RFC 2253 form
// ("CN=web1.example.com" for a Puppet certificate, "CN=provisioner,OU=service,O=muster" for a
// service). Service subjects carry OU and O, which the Puppet CA never puts in a node certificate,
// so no node can be issued a certificate that maps to a service user.
//
// What each role may do:
//   node         subscribe: its own direct subject, broadcast subjects, its own reply inboxes
//                publish:   replies (allow_responses), registration, lifecycle and agent events,
//                           its own heartbeat and Puppet runs keys, its own audit subject
//   bootstrap    the same, but only in the provisioning collective: a node not yet provisioned
//                reaches nothing else, and nothing but the provisioner reaches it. One credential per
//                node (user CN=<id>,OU=bootstrap,O=<org>): it subscribes to that node's direct subject
//                only, so a stolen one reaches one node; it writes that node's heartbeat and audit
//                records only. Single-use: a provisioned node's is left out.
//   provisioner  requests to the provisioning collective and the fleet, its state bucket, events,
//                provisioners' keys of the services bucket (its service heartbeat)
//   admin        requests to the fleet (never to provisioning nodes), JetStream, KV, events; publishes
//                runall progress events (muster.event.runall.*) and no other event; enrolls keys
//                in the node-key directory
//   registry     registrations in, queries answered, its bucket, registries' keys of the services
//                bucket; asks nodes to register now
//                (<collective>.registration.solicit), which nodes and bootstrap nodes subscribe to

const dn = z.string().min(1).max(1024);
/** Characters a DN attribute value may hold here without escaping, in both openssl's and RFC 2253's form. */
const DN_VALUE = /^[A-Za-z0-9 ._-]{1,64}$/;

import { BOOTSTRAP_ORG } from "./bootstrap-defaults.js";

export { BOOTSTRAP_ORG };

/**
 * A node's own bootstrap credential: the broker user (RFC 2253, as verify_and_map names it) and the
 * certificate subject (openssl's form) for one identity. OU=bootstrap keeps it apart from the node's
 * Puppet certificate (CN only) and from services (OU=service). A rotation issues generation 2, 3, ...
 * (OU=bootstrap-<n>): a new user, so the old certificate can be retired while the new one works.
 */
export function bootstrapUser(identity: string, org = BOOTSTRAP_ORG, generation = 1): { user: string; subject: string } {
  if (!isValidIdentity(identity)) throw new MusterError("MUSTER_USAGE", `not a node identity: ${JSON.stringify(identity)} (letters, digits, - _ . : @)`);
  if (!DN_VALUE.test(org)) throw new MusterError("MUSTER_USAGE", `--org ${JSON.stringify(org)}: letters, digits, space . _ - only`);
  if (!Number.isInteger(generation) || generation < 1 || generation > 9999) throw new MusterError("MUSTER_USAGE", `--generation ${generation}: a whole number from 1 to 9999`);
  const ou = generation === 1 ? "bootstrap" : `bootstrap-${generation}`;
  return { user: `CN=${identity},OU=${ou},O=${org}`, subject: `/O=${org}/OU=${ou}/CN=${identity}` };
}
const collective = z.string().refine(isValidCollective, "collective names are letters, digits, - and _");

export const BrokerAuthSpecSchema = z
  .object({
    collectives: z.array(collective).min(1).default(["muster"]),
    /** The collective of nodes waiting to be provisioned (provisioning.collective on the nodes). */
    provisioning_collective: collective.default("provisioning"),
    nodes: z
      .array(
        z
          .object({
            identity: z.string().refine(isValidIdentity, "an identity: letters, digits, - _ . : @"),
            /** Certificate user names; default `CN=<identity>` (a Puppet certificate). */
            users: z.array(dn).min(1).optional(),
            /** The node runs the notify agent: it may keep its dedupe keys in `notify_bucket`. */
            notifier: z.boolean().optional(),
          })
          .strict(),
      )
      .default([]),
    /**
     * Bootstrap credentials of nodes not yet provisioned. `{identity}`: that node's own credential
     * (user `CN=<identity>,OU=bootstrap,O=<bootstrap_org>`, as `muster broker bootstrap-credential`
     * issues it), confined to its node. `{user}` alone: a shared credential (one certificate baked
     * into every image) that reaches every waiting node's subject: avoid it where nodes are untrusted.
     */
    bootstrap: z
      .array(
        z
          .object({
            user: dn.optional(),
            identity: z.string().refine(isValidIdentity, "an identity: letters, digits, - _ . : @").optional(),
            /** Which issue of the node's credential (`--generation`; default 1): list old and new while rotating. */
            generation: z.number().int().min(1).max(9999).optional(),
          })
          .strict()
          .refine((b) => b.user !== undefined || b.identity !== undefined, "give identity (a per-node credential) or user (a shared one)"),
      )
      .default([]),
    /** O= of per-node bootstrap certificates (`muster broker bootstrap-credential --org`). */
    bootstrap_org: z.string().regex(DN_VALUE, "letters, digits, space . _ - only").default(BOOTSTRAP_ORG),
    /**
     * Single-use bootstrap credentials: identities already provisioned, whose bootstrap users are
     * left out (`muster broker users --retire-provisioned` adds those the provisioner marks done).
     */
    provisioned: z.array(z.string().refine(isValidIdentity, "an identity: letters, digits, - _ . : @")).default([]),
    provisioners: z.array(dn).default([]),
    admins: z.array(dn).default([]),
    registries: z.array(dn).default([]),
    /** KV bucket of the provisioner's state (provisioner state_bucket). */
    state_bucket: z.string().default(DEFAULT_STATE_BUCKET),
    /** KV bucket of the registry. */
    registry_bucket: z.string().default(DEFAULT_REGISTRY_BUCKET),
    /** KV bucket of the notifiers' delivered dedupe keys (notify agent `dedupe_bucket`). */
    notify_bucket: z.string().default(DEFAULT_NOTIFY_BUCKET),
  })
  .strict();
export type BrokerAuthSpec = z.input<typeof BrokerAuthSpecSchema>;

export interface Permissions {
  publish: { allow: string[] };
  subscribe: { allow: string[] };
  allow_responses?: boolean;
}

export interface BrokerUser {
  user: string;
  permissions: Permissions;
}

const JS_CLIENT = ["$JS.API.>", "$JS.FC.>", "$JS.ACK.>"];

/** Subjects a production node may use, per identity. */
export function nodePermissions(identity: string, collectives: string[]): Permissions {
  return {
    // audit.stream: the node publishes its own records and looks the stream up; admins create it
    // heartbeats and Puppet runs: plain publishes to its own keys of the two buckets (docs/fleet.md#health)
    publish: { allow: [...collectives.map((c) => subjects.registration(c)), "muster.lifecycle.>", "muster.event.>", `muster.audit.${identity}`, "$JS.API.INFO", "$JS.API.STREAM.INFO.*", heartbeatSubject(identity), puppetRunSubject(identity)] },
    subscribe: { allow: [...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.node(c, identity), subjects.registrationSolicit(c)]), `${inboxPrefixFor(identity)}.>`] },
    allow_responses: true,
  };
}

/**
 * What a notifier adds to its node permissions: its dedupe bucket, found or created, read with
 * direct gets and written with acknowledged puts (the acks come to the node's own inbox).
 */
export function notifierPermissions(bucket: string): Permissions {
  const stream = kvStreamName(bucket);
  return {
    publish: { allow: [`$JS.API.STREAM.CREATE.${stream}`, `$JS.API.STREAM.UPDATE.${stream}`, `$JS.API.DIRECT.GET.${stream}.>`, `$JS.API.STREAM.MSG.GET.${stream}`, `$KV.${bucket}.>`] },
    subscribe: { allow: [] },
  };
}

function merge(a: Permissions, b: Permissions): Permissions {
  return { ...a, publish: { allow: [...a.publish.allow, ...b.publish.allow] }, subscribe: { allow: [...a.subscribe.allow, ...b.subscribe.allow] } };
}

/** A node not yet provisioned: the provisioning collective only (one node's subject, or all of them for a shared credential). */
export function bootstrapPermissions(provisioning: string, identity?: string): Permissions {
  // a node's own credential also writes its heartbeat and its audit records (subjects naming it);
  // a shared one may not: it could write any node's
  const own = identity ? [heartbeatSubject(identity), `muster.audit.${identity}`, "$JS.API.INFO", "$JS.API.STREAM.INFO.*"] : [];
  // ...and reads the answers to its JetStream lookups on its own inbox (the prefix the node's
  // connection uses, as in production: one node's cannot cover another's); a shared credential
  // asks JetStream nothing
  const inbox = identity ? [`${inboxPrefixFor(identity)}.>`] : [];
  return {
    publish: { allow: [subjects.registration(provisioning), "muster.lifecycle.>", "muster.event.provision.>", ...own] },
    subscribe: { allow: [`${provisioning}.broadcast.agent.>`, identity ? subjects.node(provisioning, identity) : subjects.allNodes(provisioning), subjects.registrationSolicit(provisioning), ...inbox] },
    allow_responses: true,
  };
}

export function provisionerPermissions(collectives: string[], provisioning: string, bucket: string): Permissions {
  return {
    // the node-key directory: only the provisioner vouches; its service heartbeat: provisioners' keys only
    publish: { allow: [`${provisioning}.broadcast.agent.>`, subjects.allNodes(provisioning), ...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.allNodes(c)]), ...JS_CLIENT, `$KV.${bucket}.>`, `$KV.${DEFAULT_NODE_KEYS_BUCKET}.>`, serviceRoleSubjects("provisioner")] },
    subscribe: { allow: ["_INBOX.>", "muster.lifecycle.>", "muster.event.>"] },
  };
}

export function adminPermissions(collectives: string[], buckets: string[]): Permissions {
  return {
    // runall events: `muster puppet runall` and the web console announce their runs' progress
    // (protocol/events.ts); only that pseudo-agent, so an admin cannot forge a node's events.
    // The node-key directory: an admin enrolls the machines no provisioner vouches for (masters,
    // the notifier: `muster key enroll`); it may already rewrite the provisioner's records and pins.
    // The console and the CLI keep their own actions in the audit stream and alerts in their
    // history (an admin may already rewrite any stream through the JetStream API).
    publish: { allow: [...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.allNodes(c)]), "muster.registry.*.query", "muster.registry.*.puppetdb", subjects.event(RUNALL_AGENT, "*"), "muster.audit.>", "muster.alerts.>", ...JS_CLIENT, ...buckets.map((b) => `$KV.${b}.>`), `$KV.${DEFAULT_NODE_KEYS_BUCKET}.>`] },
    subscribe: { allow: ["_INBOX.>", "muster.lifecycle.>", "muster.event.>", ...collectives.map((c) => subjects.registration(c))] },
  };
}

export function registryPermissions(collectives: string[], bucket: string): Permissions {
  return {
    publish: { allow: [...JS_CLIENT, `$KV.${bucket}.>`, ...collectives.map((c) => subjects.registrationSolicit(c)), serviceRoleSubjects("registry")] },
    // the query subjects: its own store's, and PuppetDB's for the clients (registry/puppetdb.ts)
    subscribe: { allow: ["_INBOX.>", ...collectives.map((c) => subjects.registration(c)), "muster.registry.*.query", "muster.registry.*.puppetdb"] },
    allow_responses: true,
  };
}

/** Every user the spec describes, in a stable order. */
export function brokerUsers(input: BrokerAuthSpec): BrokerUser[] {
  const spec = BrokerAuthSpecSchema.parse(input);
  const out: BrokerUser[] = [];
  const seen = new Set<string>();
  const add = (user: string, permissions: Permissions) => {
    // one certificate name, one user: nats-server would refuse the duplicate anyway, less clearly
    if (seen.has(user)) throw new MusterError("MUSTER_CONFIG_INVALID", `user ${JSON.stringify(user)} appears twice; each credential has one role`);
    seen.add(user);
    out.push({ user, permissions });
  };
  for (const u of spec.admins) add(u, adminPermissions(spec.collectives, [spec.state_bucket, spec.registry_bucket, DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_SERVICES_BUCKET]));
  for (const u of spec.provisioners) add(u, provisionerPermissions(spec.collectives, spec.provisioning_collective, spec.state_bucket));
  for (const u of spec.registries) add(u, registryPermissions(spec.collectives, spec.registry_bucket));
  const retired = new Set(spec.provisioned);
  for (const b of spec.bootstrap) {
    if (b.identity !== undefined && retired.has(b.identity)) continue; // single-use: its node is provisioned
    add(b.user ?? bootstrapUser(b.identity!, spec.bootstrap_org, b.generation).user, bootstrapPermissions(spec.provisioning_collective, b.identity));
  }
  for (const n of spec.nodes) {
    const perms = nodePermissions(n.identity, spec.collectives);
    for (const u of n.users ?? [`CN=${n.identity}`]) add(u, n.notifier ? merge(perms, notifierPermissions(spec.notify_bucket)) : perms);
  }
  return out;
}

/** nats-server `authorization` block (JSON values are valid nats-server config). */
export function authorizationConfig(spec: BrokerAuthSpec): string {
  const users = brokerUsers(spec).map((u) => `    ${JSON.stringify(u)}`);
  return `authorization {\n  users = [\n${users.join("\n")}\n  ]\n}\n`;
}
