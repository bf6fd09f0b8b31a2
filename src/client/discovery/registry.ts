import type { NatsConnection } from "@nats-io/transport-node";
import { MusterError } from "../../errors.js";
import { subjects } from "../../protocol/subjects.js";
import type { Filter } from "../../protocol/types.js";
import { DEFAULT_BUCKET, readRegistry } from "../../registry/bucket.js";
import type { RegistryRecord } from "../../registry/record.js";
import { checkRegistryFilter, selectNodes } from "../../registry/select.js";
import type { DiscoveryOptions, NodeSource } from "./source.js";

// --dm registry: the nodes matching a filter, from the registry instead of a broadcast. No node is
// asked anything. Two ways to the same answer (registry/select.ts does the matching for both):
//   1. ask `muster registry serve` on its query subject: one request, identities back;
//   2. when no daemon answers (or the answer would not fit in a message), read the bucket itself.
// Every filter kind is answered, compound included; of the data plugins only fact() and agent()
// (present, name) can be, from registration data: any other throws a FilterError, before anything
// is sent, saying to use broadcast discovery.
//
// Registry data is as fresh as the last registration. Calls still carry the filter, so a node whose
// facts changed since answers "does not match" instead of running the action.

export interface RegistrySourceOptions {
  bucket?: string;
  collective: string;
  /** "auto" (default): the daemon, else the bucket. "service" or "bucket" force one. */
  via?: "auto" | "service" | "bucket";
  /** How long to wait for the daemon before reading the bucket, ms (default 1000, capped by --dt). */
  serviceTimeoutMs?: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export class RegistrySource implements NodeSource {
  readonly name = "registry";
  readonly bucket: string;
  /** How the last discover() was answered (for benches and tests). */
  lastVia: "service" | "bucket" | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly opts: RegistrySourceOptions,
  ) {
    this.bucket = opts.bucket ?? DEFAULT_BUCKET;
  }

  async discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    checkRegistryFilter(filter);
    const via = this.opts.via ?? "auto";
    let found: string[] | undefined;
    if (via !== "bucket") {
      found = await this.askService(filter, Math.min(this.opts.serviceTimeoutMs ?? 1000, opts.timeoutMs));
      if (found === undefined && via === "service") throw new MusterError("MUSTER_REGISTRY_UNAVAILABLE", `no registry daemon answered on ${subjects.registryQuery(this.bucket)}; start \`muster registry serve\``);
    }
    if (found === undefined) found = (await this.records(filter, Math.max(opts.timeoutMs, 30_000))).map((r) => r.identity);
    else this.lastVia = "service";
    if (opts.onFound) for (const id of found) opts.onFound(id);
    return found;
  }

  /** Matching records with their metadata, read from the bucket (`muster registry query`). */
  async records(filter: Filter, timeoutMs = 30_000): Promise<RegistryRecord[]> {
    checkRegistryFilter(filter);
    const snap = await readRegistry(this.nc, this.bucket, timeoutMs);
    this.lastVia = "bucket";
    return selectNodes(snap.records, filter, { collective: this.opts.collective, now: Date.now(), expireAfterMs: snap.expireAfterMs });
  }

  /** The daemon's answer, or undefined when there is none to be had (then the bucket is read). */
  private async askService(filter: Filter, timeoutMs: number): Promise<string[] | undefined> {
    let data: Uint8Array;
    try {
      const msg = await this.nc.request(subjects.registryQuery(this.bucket), enc.encode(JSON.stringify({ filter, collective: this.opts.collective })), { timeout: timeoutMs });
      data = msg.data;
    } catch {
      return undefined; // no responders, timeout: read the bucket
    }
    let reply: { identities?: unknown; error?: unknown };
    try {
      reply = JSON.parse(dec.decode(data)) as typeof reply;
    } catch {
      return undefined;
    }
    if (Array.isArray(reply.identities) && reply.identities.every((x) => typeof x === "string")) return reply.identities as string[];
    return undefined; // too large, or an error the local check did not foresee: the bucket is the source of truth
  }
}
