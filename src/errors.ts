import type { StatusCode } from "./protocol/status.js";

// Local errors carry a stable MUSTER_* code and a message that says what to do.
// docs/errors.md lists every code; test/errors.test.ts keeps the two in step.
export const ErrorCodes = {
  MUSTER_CONFIG_INVALID: "a configuration file failed validation",
  MUSTER_CONFIG_NOT_FOUND: "a configuration file does not exist",
  MUSTER_FILTER_INVALID: "a filter (-F -C -I -A -W -S) does not parse",
  MUSTER_DDL_INVALID: "an agent DDL is malformed",
  MUSTER_INPUT_INVALID: "an action input fails its DDL validation",
  MUSTER_UNKNOWN_AGENT: "no DDL is known for the named agent",
  MUSTER_UNKNOWN_ACTION: "the agent's DDL has no such action",
  MUSTER_ENVELOPE_INVALID: "a message is not a valid muster envelope",
  MUSTER_SIGNATURE_INVALID: "a request signature does not verify or its key is not trusted",
  MUSTER_REQUEST_EXPIRED: "a request is past its ttl or too far in the future",
  MUSTER_REQUEST_REPLAYED: "a request id was already seen",
  MUSTER_BROKER_UNREACHABLE: "no NATS broker answered",
  MUSTER_KEY_ERROR: "the signing key cannot be read or created",
  MUSTER_USAGE: "the command line is malformed",
  MUSTER_PUPPET_FAILED: "a puppet command failed",
  MUSTER_CA_ERROR: "the Puppet CA refused or failed a request",
  MUSTER_NOTIFY_FAILED: "a notification could not be delivered",
  MUSTER_TIMEOUT: "an operation did not finish in time",
  MUSTER_REGISTRY_UNAVAILABLE: "the registry bucket does not exist or cannot be read",
  MUSTER_PKI_FAILED: "a TLS certificate or key could not be made or read",
  MUSTER_NO_MASTER: "no Puppet master answered, so nothing was changed",
  MUSTER_UNKNOWN_NODE: "the provisioner has no record of the named node",
  MUSTER_RETRY_REFUSED: "provision retry was asked for a node that is not failed",
  MUSTER_BUCKET_NOT_FOUND: "a JetStream KV bucket that was to be read does not exist",
  MUSTER_PRIVILEGED_REFUSED: "the privileged helper refused an operation",
  MUSTER_PRIVILEGED_UNREACHABLE: "the privileged helper's socket did not answer",
  MUSTER_PRIVILEGED_BUSY: "the privileged helper was at its connection limit",
  MUSTER_BROKER_REFUSED: "the broker cluster refused a JetStream operation",
  MUSTER_PUPPETDB_UNAVAILABLE: "PuppetDB, or the registry that reaches it, could not answer",
  MUSTER_NO_OPEN_ALERT: "an acknowledgement named no open alert",
} as const;
export type ErrorCode = keyof typeof ErrorCodes;

export class MusterError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "MusterError";
    this.code = code;
  }
}

/** Thrown by an action handler (or a pipeline stage) to reply with a non-zero status. */
export class RpcError extends Error {
  readonly status: StatusCode;
  /** Reply data sent along with the failure (e.g. the failed resources of a Puppet run). */
  readonly data: Record<string, unknown>;
  constructor(status: StatusCode, message: string, data: Record<string, unknown> = {}) {
    super(message);
    this.name = "RpcError";
    this.status = status;
    this.data = data;
  }
}
