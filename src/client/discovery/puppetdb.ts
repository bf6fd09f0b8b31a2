import type { NatsConnection } from "@nats-io/transport-node";
import { MusterError } from "../../errors.js";
import { FilterError, pqlQueryOf } from "../../filter/index.js";
import { checkDiscoverReply, checkNodesReply, checkRunsReply, type PuppetDbNodeStatus, type PuppetDbRun } from "../../protocol/puppetdb.js";
import { subjects } from "../../protocol/subjects.js";
import type { Filter } from "../../protocol/types.js";
import { DEFAULT_BUCKET } from "../../registry/bucket.js";
import type { DiscoveryOptions, NodeSource } from "./source.js";

// --dm puppetdb: the nodes PuppetDB lists as matching, asked of the registry daemon that holds the
// PuppetDB credential (`muster.registry.<bucket>.puppetdb`, protocol/puppetdb.ts). Why through the
// registry and not straight to PuppetDB: docs/puppetdb.md#how-muster-reaches-puppetdb.
//
// The nodes are then called as with any source, and still check the filter themselves against
// their own facts; a `pql:` identity is a PuppetDB query no node can evaluate, so requestFilter()
// leaves identities out of what they are sent (the call is addressed to the nodes found anyway).
// A node PuppetDB named that does not answer is in the call's noResponse, as with --dm registry.

export interface PuppetDbSourceOptions {
  /** The registry's bucket: its daemon answers on muster.registry.<bucket>.puppetdb. */
  bucket?: string;
  collective: string;
  /** Told what PuppetDB cannot place (nodes without the muster fact); the CLI prints it on stderr. */
  onWarning?: (message: string) => void;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** No registry answers for PuppetDB on this broker: PuppetDB is not configured (health then does without it). */
export class NoPuppetDb extends MusterError {
  constructor(message: string) {
    super("MUSTER_PUPPETDB_UNAVAILABLE", message);
    this.name = "NoPuppetDb";
  }
}

export class PuppetDbSource implements NodeSource {
  readonly name = "puppetdb";
  readonly bucket: string;
  /** The PuppetDB the registry asked at the last discover(). */
  lastPuppetDb: string | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly opts: PuppetDbSourceOptions,
  ) {
    this.bucket = opts.bucket ?? DEFAULT_BUCKET;
  }

  /** One request to the registry's PuppetDB subject, its answer parsed (MUSTER_PUPPETDB_UNAVAILABLE when none comes). */
  private async ask(body: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
    const subject = subjects.registryPuppetDb(this.bucket);
    let data: Uint8Array;
    try {
      data = (await this.nc.request(subject, enc.encode(JSON.stringify(body)), { timeout: timeoutMs })).data;
    } catch (e) {
      if (/no responders/i.test((e as Error).message)) throw new NoPuppetDb(`--dm puppetdb asks the registry on ${subject}: no registry daemon with a puppetdb: section answers there. Start \`muster registry serve\` with puppetdb: in its config (docs/puppetdb.md), or use --dm broadcast`);
      throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `--dm puppetdb asks the registry on ${subject}: ${(e as Error).message}. Is \`muster registry serve\` with puppetdb: running (docs/puppetdb.md)? Or use --dm broadcast`);
    }
    try {
      return JSON.parse(dec.decode(data));
    } catch {
      return undefined;
    }
  }

  private failed(r: { error: string; code: string }): never {
    if (r.code === "MUSTER_FILTER_INVALID") throw new FilterError(r.error, "", 0);
    throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `the registry on ${subjects.registryPuppetDb(this.bucket)} could not ask PuppetDB: ${r.error}`);
  }

  async discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    // PuppetDB may take a while on a large fleet: at least 30 s, whatever --dt says
    const r = checkDiscoverReply(await this.ask({ op: "discover", filter, collective: this.opts.collective }, Math.max(opts.timeoutMs, 30_000)));
    if ("error" in r) this.failed(r);
    this.lastPuppetDb = r.puppetdb;
    for (const w of r.warnings) this.opts.onWarning?.(w);
    if (opts.onFound) for (const id of r.identities) opts.onFound(id);
    return r.identities;
  }

  /** Every node PuppetDB lists as active, with its latest report (fleet health's record of Puppet runs). */
  async nodes(timeoutMs = 30_000): Promise<PuppetDbNodeStatus[]> {
    const out: PuppetDbNodeStatus[] = [];
    for (let offset = 0; ; ) {
      const r = checkNodesReply(await this.ask({ op: "nodes", offset }, timeoutMs));
      if ("error" in r) this.failed(r);
      this.lastPuppetDb = r.puppetdb;
      out.push(...r.nodes);
      // a registry must move forward: a page that does not is the end
      if (!r.more || r.next <= offset) return out;
      offset = r.next;
    }
  }

  /** A node's last `limit` runs as PuppetDB recorded them, newest first, with a failed run's failed events. */
  async runs(certname: string, limit = 5, timeoutMs = 30_000): Promise<PuppetDbRun[]> {
    const r = checkRunsReply(await this.ask({ op: "runs", certname, limit }, timeoutMs), certname);
    if ("error" in r) this.failed(r);
    this.lastPuppetDb = r.puppetdb;
    return r.runs;
  }

  /** What the nodes are sent: without identities when a pql: one is among them (PuppetDB answered it). */
  requestFilter(filter: Filter): Filter {
    return filter.identity.some((i) => pqlQueryOf(i) !== undefined) ? { ...filter, identity: [] } : filter;
  }
}
