import type { NatsConnection } from "@nats-io/transport-node";
import { MusterError } from "../../errors.js";
import { subjects } from "../../protocol/subjects.js";
import type { Filter } from "../../protocol/types.js";
import { bucketsOn } from "../../broker/bucket.js";
import { DEFAULT_BUCKET, readRegistry } from "../../registry/bucket.js";
import type { RegistryRecord } from "../../registry/record.js";
import { checkRegistryFilter, registryStatus, registryWarning, selectNodes, type RegistryStatus } from "../../registry/select.js";
import type { DiscoveryOptions, NodeSource } from "./source.js";

// --dm registry: the nodes matching a filter, from the registry instead of a broadcast. No node is
// asked anything. Two ways to the same answer (registry/select.ts does the matching for both):
//   1. ask `muster registry serve` on its query subject: one request, identities back;
//   2. when no daemon answers (or the answer would not fit in a message), read the bucket itself.
// Every filter kind is answered, compound included; of the data plugins only fact() and agent()
// (present, name) can be, from registration data: any other throws a FilterError, before anything
// is sent, saying to use broadcast discovery.
//
// An empty, still-filling or stale registry is reported through onWarning (the CLI prints it on
// stderr), so "nothing matched" is not mistaken for an answer when the registry knows nothing.
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
  /** Told when the registry is empty, filling or stale (select.ts registryWarning). */
  onWarning?: (message: string) => void;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export class RegistrySource implements NodeSource {
  readonly name = "registry";
  readonly bucket: string;
  /** How the last discover() was answered (for benches and tests). */
  lastVia: "service" | "bucket" | undefined;
  /** What was wrong with the registry at the last discover()/records(), if anything. */
  lastWarning: string | undefined;

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
      const answer = await this.askService(filter, Math.min(this.opts.serviceTimeoutMs ?? 1000, opts.timeoutMs));
      if (answer === undefined && via === "service") throw new MusterError("MUSTER_REGISTRY_UNAVAILABLE", `no registry daemon answered on ${subjects.registryQuery(this.bucket)}; start \`muster registry serve\``);
      if (answer) {
        found = answer.identities;
        this.lastVia = "service";
        this.check(answer.status);
      }
    }
    if (found === undefined) found = (await this.records(filter, Math.max(opts.timeoutMs, 30_000))).map((r) => r.identity);
    if (opts.onFound) for (const id of found) opts.onFound(id);
    return found;
  }

  /** Matching records with their metadata, read from the bucket (`muster registry query`). */
  async records(filter: Filter, timeoutMs = 30_000): Promise<RegistryRecord[]> {
    checkRegistryFilter(filter);
    const snap = await readRegistry(bucketsOn(this.nc), this.bucket, timeoutMs);
    this.lastVia = "bucket";
    const sel = { collective: this.opts.collective, now: Date.now(), expireAfterMs: snap.expireAfterMs };
    this.check(registryStatus(snap.records, sel));
    return selectNodes(snap.records, filter, sel);
  }

  private check(status: RegistryStatus | undefined): void {
    this.lastWarning = status ? registryWarning(status, Date.now(), `bucket ${this.bucket}, collective ${this.opts.collective}`) : undefined;
    if (this.lastWarning) this.opts.onWarning?.(this.lastWarning);
  }

  /** The daemon's answer, or undefined when there is none to be had (then the bucket is read). */
  private async askService(filter: Filter, timeoutMs: number): Promise<{ identities: string[]; status?: RegistryStatus } | undefined> {
    let data: Uint8Array;
    try {
      const msg = await this.nc.request(subjects.registryQuery(this.bucket), enc.encode(JSON.stringify({ filter, collective: this.opts.collective })), { timeout: timeoutMs });
      data = msg.data;
    } catch {
      return undefined; // no responders, timeout: read the bucket
    }
    let reply: { identities?: unknown; error?: unknown; status?: unknown };
    try {
      reply = JSON.parse(dec.decode(data)) as typeof reply;
    } catch {
      return undefined;
    }
    if (Array.isArray(reply.identities) && reply.identities.every((x) => typeof x === "string")) return { identities: reply.identities as string[], status: asStatus(reply.status) };
    return undefined; // too large, or an error the local check did not foresee: the bucket is the source of truth
  }
}

/** A daemon's status, when it sent a well-formed one (an older daemon sends none). */
function asStatus(v: unknown): RegistryStatus | undefined {
  if (v === null || typeof v !== "object") return undefined;
  const s = v as Record<string, unknown>;
  const num = (x: unknown) => typeof x === "number" && Number.isFinite(x);
  if (!num(s.nodes) || !(s.newest_seen === null || num(s.newest_seen)) || !num(s.expire_after_ms) || !(s.started_at === undefined || num(s.started_at))) return undefined;
  return s as unknown as RegistryStatus;
}
