import { z } from "zod";
import { HOST_RE } from "../puppet/server-address.js";
import { PUPPET_STATE_FILES } from "../puppet/state.js";

// The privileged helper's whole vocabulary (docs/decisions/privileged-helper.md): the operations
// an unprivileged `muster server` may ask for, each with the arguments it may pass. Pure: bytes
// from the socket in, a typed request or a refusal out; helper.ts acts on what passes, with
// settings it reads itself. Nothing here names a command, a file or a Puppet master: those come
// from root's /etc/muster/server.yaml, never from the request.

/** One request line on the socket, at most this long (a Puppet resource's content included). */
export const MAX_REQUEST_BYTES = 64 * 1024;

// Whose Puppet settings an operation uses: the provision agent's (plugins.provision) or the puppet
// agent's (plugins.puppet). Both are the operator's, read by the helper.
const agent = z.enum(["provision", "puppet"]);
const oneLine = (max: number) => z.string().max(max).regex(/^[^\x00-\x1f\x7f]*$/, "one line of printable text");
const factName = z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/, "a fact name");
// A host name or an IPv4/IPv6 address: what `server =` in puppet.conf and --server take; never an option.
const host = z.string().max(253).regex(HOST_RE, "a host name or IP address");
const port = z.number().int().min(1).max(65535);

export const Operations = {
  /** `puppet agent --test` with the node's settings. */
  "puppet.run": z
    .object({
      agent,
      environment: z.string().regex(/^[a-z0-9_]{1,64}$/, "a Puppet environment name").optional(),
      noop: z.boolean().optional(),
      tags: z.array(z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_:.-]{0,127}$/, "a Puppet tag")).max(64).optional(),
      facts: z
        .record(factName, oneLine(4096))
        .refine((f) => Object.keys(f).length <= 64, "at most 64 facts")
        .optional(),
      /** "host[:port]": honoured only where plugins.puppet.allow_server_override says so. */
      server: z.string().max(260).optional(),
    })
    .strict(),
  /** `puppet agent` as a daemon with the node's settings. */
  "puppet.daemonize": z.object({ agent }).strict(),
  /** Puppet's own disable lock, with a message. */
  "puppet.disable": z.object({ agent, message: oneLine(1024) }).strict(),
  "puppet.enable": z.object({ agent }).strict(),
  /** Whether the node holds its signed certificate; with download, fetch it if the CSR was signed. */
  "puppet.cert_status": z.object({ download: z.boolean() }).strict(),
  /** Make the node's key and CSR (naming the node key) and submit it to the configured CA. */
  "puppet.request_certificate": z.object({ node_key: z.string().regex(/^[A-Za-z0-9+/]{43}=$/, "a base64 ed25519 public key").optional() }).strict(),
  /** Point Puppet at its master (puppet.conf; the hosts file with use_hosts_file): while provisioning only. */
  "puppet.set_server": z.object({ host, port: port.optional() }).strict(),
  /** The node's Puppet certificate and key, the broker credential of a provisioned node. */
  "puppet.tls_credential": z.object({}).strict(),
  /** `puppet resource TYPE NAME key=value ...`, within plugins.resource's allowed types and paths. */
  "puppet.resource": z
    .object({
      type: z.string().regex(/^[a-z][a-z0-9_:]{0,63}$/, "a resource type"),
      name: z.string().min(1).max(1024).regex(/^(?!-)[^\x00\n\r]+$/, "a resource title (no leading -, one line)"),
      properties: z
        .array(z.tuple([z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, "a property name"), z.string().min(1).max(16 * 1024).regex(/^[^\x00\n\r]+$/, "a one-line value")]))
        .max(64),
    })
    .strict(),
  /** The stage fact file says `production` (the name and path: plugins.provision). */
  "provision.persist_stage": z.object({}).strict(),
  /** Read-only: the facts Puppet uses (`puppet facts show` as root), what discovery matches. */
  "puppet.facts": z.object({}).strict(),
  /** Read-only: one of Puppet's state files, by name, where root's settings put it. */
  "puppet.read_state": z.object({ agent, file: z.enum(PUPPET_STATE_FILES) }).strict(),
  /** Read-only: what the last run's report says (bounded). */
  "puppet.last_run_report": z.object({ agent }).strict(),
} as const;

export type OperationName = keyof typeof Operations;
export const OPERATION_NAMES = Object.keys(Operations) as OperationName[];
export type OperationArgs<O extends OperationName> = z.output<(typeof Operations)[O]>;
export type Request = { [O in OperationName]: { op: O; args: OperationArgs<O> } }[OperationName];

/** The wire: one JSON line each way. */
export type Reply = { ok: true; result: unknown } | { ok: false; refused: boolean; code: string; error: string };

/** Why a request is not one the helper serves, or the request. */
export type Parsed = { ok: true; request: Request } | { ok: false; error: string };

/** Parse one request line: the operation must be on the list and its arguments exactly its own. */
export function parseRequest(line: string | Buffer): Parsed {
  if (Buffer.byteLength(line) > MAX_REQUEST_BYTES) return { ok: false, error: `request over ${MAX_REQUEST_BYTES} bytes` };
  let raw: unknown;
  try {
    raw = JSON.parse(String(line));
  } catch {
    return { ok: false, error: "not a JSON request" };
  }
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) return { ok: false, error: "a request is an object {op, args}" };
  const { op, args, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) return { ok: false, error: `unexpected fields: ${Object.keys(rest).join(", ")}` };
  if (typeof op !== "string" || !Object.hasOwn(Operations, op)) return { ok: false, error: `operation ${JSON.stringify(op)} is not on the helper's list (${OPERATION_NAMES.join(", ")})` };
  const name = op as OperationName;
  const checked = Operations[name].safeParse(args ?? {});
  if (!checked.success) {
    const issue = checked.error.issues[0];
    return { ok: false, error: `${name}: ${issue?.path.length ? `${issue.path.join(".")}: ` : ""}${issue?.message ?? "invalid arguments"}` };
  }
  return { ok: true, request: { op: name, args: checked.data } as Request };
}

/** Pure: whether a peer's uid may talk to the helper at all (SO_PEERCRED, checked per connection). */
export function peerAllowed(peerUid: number, clientUid: number): boolean {
  return Number.isInteger(peerUid) && peerUid === clientUid;
}
