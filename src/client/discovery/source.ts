import type { Filter } from "../../protocol/types.js";

/** A way to find nodes matching a filter. Broadcast, flatfile and the registry implement it. */
export interface NodeSource {
  readonly name: string;
  discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]>;
  /** True when nodes still evaluate the filter themselves (flatfile only knows identities). */
  readonly partial?: boolean;
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
