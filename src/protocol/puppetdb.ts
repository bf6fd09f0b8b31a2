// PuppetDB through the registry daemon: `muster.registry.<bucket>.puppetdb` (subjects.ts). The
// registry holds the PuppetDB credential and asks PuppetDB; clients (the CLI, the console, the
// bench) need only the broker. docs/puppetdb.md describes it. Pure: message shapes and the checks
// a client makes of an answer (the registry is trusted no more than any other sender).
//
//   request  {"op": "discover", "filter": <wire Filter>, "collective": "muster"}
//   reply    {"identities": [...], "warnings": [...], "puppetdb": "<its URL>"}
//          | {"error": "...", "code": "MUSTER_FILTER_INVALID" | "MUSTER_PUPPETDB_UNAVAILABLE" | "bad_request" | "too_large" | "no_puppetdb"}

export const PuppetDbOps = ["discover"] as const;
export type PuppetDbOp = (typeof PuppetDbOps)[number];

export interface PuppetDbDiscoverRequest {
  op: "discover";
  filter: unknown;
  collective?: string;
}

export type PuppetDbRequest = PuppetDbDiscoverRequest;

export interface PuppetDbDiscoverReply {
  identities: string[];
  warnings: string[];
  /** The PuppetDB the registry asked (its base URL), for messages. */
  puppetdb: string;
}

export interface PuppetDbErrorReply {
  error: string;
  code: string;
}

export const MAX_PUPPETDB_REQUEST_BYTES = 256 * 1024;

const isStrings = (x: unknown): x is string[] => Array.isArray(x) && x.every((s) => typeof s === "string");

/** A registry's answer to discover, checked; an error reply or a malformed one is a string saying what. */
export function checkDiscoverReply(x: unknown): PuppetDbDiscoverReply | PuppetDbErrorReply {
  if (x === null || typeof x !== "object") return { error: "the registry's answer is not an object", code: "bad_reply" };
  const r = x as Record<string, unknown>;
  if (typeof r.error === "string") return { error: r.error, code: typeof r.code === "string" ? r.code : "unknown" };
  if (!isStrings(r.identities) || !isStrings(r.warnings ?? []) || typeof r.puppetdb !== "string") return { error: "the registry's answer lacks identities, warnings or puppetdb", code: "bad_reply" };
  return { identities: r.identities, warnings: (r.warnings as string[] | undefined) ?? [], puppetdb: r.puppetdb };
}
