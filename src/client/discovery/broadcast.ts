import type { Filter } from "../../protocol/types.js";
import type { DiscoveryOptions, NodeSource } from "./source.js";

/** Sends discovery#ping to every node; the ones whose filter matches answer. Implemented by the client. */
export class BroadcastSource implements NodeSource {
  readonly name = "broadcast";
  constructor(private readonly ping: (filter: Filter, opts: DiscoveryOptions) => Promise<string[]>) {}
  discover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    return this.ping(filter, opts);
  }
}
