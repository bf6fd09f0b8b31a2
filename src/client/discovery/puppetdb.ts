import type { NatsConnection } from "@nats-io/transport-node";
import { MusterError } from "../../errors.js";
import { FilterError, pqlQueryOf } from "../../filter/index.js";
import { checkDiscoverReply } from "../../protocol/puppetdb.js";
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

  async discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    const subject = subjects.registryPuppetDb(this.bucket);
    let data: Uint8Array;
    try {
      // PuppetDB may take a while on a large fleet: at least 30 s, whatever --dt says
      const msg = await this.nc.request(subject, enc.encode(JSON.stringify({ op: "discover", filter, collective: this.opts.collective })), { timeout: Math.max(opts.timeoutMs, 30_000) });
      data = msg.data;
    } catch (e) {
      const why = /no responders/i.test((e as Error).message) ? "no registry daemon with a puppetdb: section answers there" : (e as Error).message;
      throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `--dm puppetdb asks the registry on ${subject}: ${why}. Start \`muster registry serve\` with puppetdb: in its config (docs/puppetdb.md), or use --dm broadcast`);
    }
    let body: unknown;
    try {
      body = JSON.parse(dec.decode(data));
    } catch {
      body = undefined;
    }
    const r = checkDiscoverReply(body);
    if ("error" in r) {
      if (r.code === "MUSTER_FILTER_INVALID") throw new FilterError(r.error, "", 0);
      throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `the registry on ${subject} could not ask PuppetDB: ${r.error}`);
    }
    this.lastPuppetDb = r.puppetdb;
    for (const w of r.warnings) this.opts.onWarning?.(w);
    if (opts.onFound) for (const id of r.identities) opts.onFound(id);
    return r.identities;
  }

  /** What the nodes are sent: without identities when a pql: one is among them (PuppetDB answered it). */
  requestFilter(filter: Filter): Filter {
    return filter.identity.some((i) => pqlQueryOf(i) !== undefined) ? { ...filter, identity: [] } : filter;
  }
}
