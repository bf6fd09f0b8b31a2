import type { Filter } from "../../protocol/types.js";

/** A way to find nodes matching a filter. Broadcast, flatfile, the registry and PuppetDB implement it. */
export interface NodeSource {
  readonly name: string;
  discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]>;
  /** True when nodes still evaluate the filter themselves (flatfile only knows identities). */
  readonly partial?: boolean;
  /** The filter a call sends its nodes, when the source answered part of it no node can (PuppetDB's pql: identities). */
  requestFilter?(filter: Filter): Filter;
}

export interface DiscoveryOptions {
  /** Upper bound on discovery time (--dt), ms. */
  timeoutMs: number;
  /** Broadcast: stop once no reply has arrived for this long after the last one, ms. */
  idleMs: number;
  /** Broadcast: the nodes expected to answer; discovery ends once they all did (collector.ts, `anticipate`). */
  anticipate?: ReadonlySet<string>;
  onFound?: (identity: string) => void;
}
