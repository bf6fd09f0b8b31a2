import { readFileSync, rmSync } from "node:fs";
import type { Filter } from "../protocol/types.js";
import { cacheFileFor, writeCacheFile } from "./cache.js";

// The last broadcast discovery's answer, per broker, collective and filter, so the next one knows
// which nodes to expect and ends as soon as they all answered instead of waiting out the idle
// window (client DiscoverOptions.anticipate; issue 29). Kept in the user's cache directory
// (cache.ts), one small JSON file per question. What it may cost when wrong: a node that left is
// waited for until --dt once (that discovery's answer replaces the memory); a node that arrived
// makes that discovery end on the idle window, as without the memory. MUSTER_DISCOVERY_CACHE=off
// turns it off.

export interface DiscoveryMemory {
  /** The nodes the last discovery found, if there was one. */
  readonly anticipate?: string[];
  /** Keeps this discovery's answer for the next. */
  remember(found: readonly string[]): void;
}

const none: DiscoveryMemory = { remember: () => undefined };

export function discoveryMemory(question: { servers: readonly string[]; collective: string; filter: Filter }, env: NodeJS.ProcessEnv = process.env): DiscoveryMemory {
  if (env.MUSTER_DISCOVERY_CACHE === "off" || env.MUSTER_DISCOVERY_CACHE === "0") return none;
  const file = cacheFileFor(env, "discovery", [[...question.servers].sort(), question.collective, question.filter]);
  if (!file) return none;
  let anticipate: string[] | undefined;
  try {
    const saved = JSON.parse(readFileSync(file, "utf8")) as { nodes?: unknown };
    if (Array.isArray(saved.nodes) && saved.nodes.every((n) => typeof n === "string")) anticipate = saved.nodes as string[];
  } catch {
    // none yet, or unreadable: discover as without one
  }
  return {
    anticipate,
    remember(found) {
      // a failed write: the next discovery waits its idle window
      if (found.length > 0) return writeCacheFile(file, JSON.stringify({ nodes: found }));
      try {
        rmSync(file, { force: true });
      } catch {
        // a read-only cache: the stale answer is waited for until --dt once, as a node that left is
      }
    },
  };
}
