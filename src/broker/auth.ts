import { z } from "zod";
import { MusterError } from "../errors.js";
import { DEFAULT_NODE_KEYS_BUCKET, DEFAULT_REGISTRY_BUCKET, DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";
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
//                publish:   replies (allow_responses), registration, lifecycle and agent events
//   bootstrap    the same, but only in the provisioning collective: a node not yet provisioned
//                reaches nothing else, and nothing but the provisioner reaches it
//   provisioner  requests to the provisioning collective and the fleet, its state bucket, events
//   admin        requests to the fleet (never to provisioning nodes), JetStream, KV, events
//   registry     registrations in, queries answered, its bucket; asks nodes to register now
//                (<collective>.registration.solicit), which nodes and bootstrap nodes subscribe to

const dn = z.string().min(1).max(1024);
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
          })
          .strict(),
      )
      .default([]),
    /**
     * Bootstrap credentials of nodes not yet provisioned: shared ones (one certificate baked into
     * the image) reach every provisioning node's subject; give `identity` to confine one to its node.
     */
    bootstrap: z.array(z.object({ user: dn, identity: z.string().refine(isValidIdentity).optional() }).strict()).default([]),
    provisioners: z.array(dn).default([]),
    admins: z.array(dn).default([]),
    registries: z.array(dn).default([]),
    /** KV bucket of the provisioner's state (provisioner state_bucket). */
    state_bucket: z.string().default(DEFAULT_STATE_BUCKET),
    /** KV bucket of the registry. */
    registry_bucket: z.string().default(DEFAULT_REGISTRY_BUCKET),
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
    publish: { allow: [...collectives.map((c) => subjects.registration(c)), "muster.lifecycle.>", "muster.event.>", `muster.audit.${identity}`, "$JS.API.INFO", "$JS.API.STREAM.INFO.*"] },
    subscribe: { allow: [...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.node(c, identity), subjects.registrationSolicit(c)]), `${inboxPrefixFor(identity)}.>`] },
    allow_responses: true,
  };
}

/** A node not yet provisioned: the provisioning collective only (one node's subject, or all of them for a shared credential). */
export function bootstrapPermissions(provisioning: string, identity?: string): Permissions {
  return {
    publish: { allow: [subjects.registration(provisioning), "muster.lifecycle.>", "muster.event.provision.>"] },
    subscribe: { allow: [`${provisioning}.broadcast.agent.>`, identity ? subjects.node(provisioning, identity) : subjects.allNodes(provisioning), subjects.registrationSolicit(provisioning)] },
    allow_responses: true,
  };
}

export function provisionerPermissions(collectives: string[], provisioning: string, bucket: string): Permissions {
  return {
    publish: { allow: [`${provisioning}.broadcast.agent.>`, subjects.allNodes(provisioning), ...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.allNodes(c)]), ...JS_CLIENT, `$KV.${bucket}.>`, `$KV.${DEFAULT_NODE_KEYS_BUCKET}.>`] }, // the node-key directory: only the provisioner vouches
    subscribe: { allow: ["_INBOX.>", "muster.lifecycle.>", "muster.event.>"] },
  };
}

export function adminPermissions(collectives: string[], buckets: string[]): Permissions {
  return {
    publish: { allow: [...collectives.flatMap((c) => [`${c}.broadcast.agent.>`, subjects.allNodes(c)]), "muster.registry.*.query", ...JS_CLIENT, ...buckets.map((b) => `$KV.${b}.>`)] },
    subscribe: { allow: ["_INBOX.>", "muster.lifecycle.>", "muster.event.>", ...collectives.map((c) => subjects.registration(c))] },
  };
}

export function registryPermissions(collectives: string[], bucket: string): Permissions {
  return {
    publish: { allow: [...JS_CLIENT, `$KV.${bucket}.>`, ...collectives.map((c) => subjects.registrationSolicit(c))] },
    subscribe: { allow: ["_INBOX.>", ...collectives.map((c) => subjects.registration(c)), "muster.registry.*.query"] },
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
  for (const u of spec.admins) add(u, adminPermissions(spec.collectives, [spec.state_bucket, spec.registry_bucket]));
  for (const u of spec.provisioners) add(u, provisionerPermissions(spec.collectives, spec.provisioning_collective, spec.state_bucket));
  for (const u of spec.registries) add(u, registryPermissions(spec.collectives, spec.registry_bucket));
  for (const b of spec.bootstrap) add(b.user, bootstrapPermissions(spec.provisioning_collective, b.identity));
  for (const n of spec.nodes) for (const u of n.users ?? [`CN=${n.identity}`]) add(u, nodePermissions(n.identity, spec.collectives));
  return out;
}

/** nats-server `authorization` block (JSON values are valid nats-server config). */
export function authorizationConfig(spec: BrokerAuthSpec): string {
  const users = brokerUsers(spec).map((u) => `    ${JSON.stringify(u)}`);
  return `authorization {\n  users = [\n${users.join("\n")}\n  ]\n}\n`;
}
