import { readFileSync } from "node:fs";
import type { BeatMemory } from "../health/read.js";
import type { Beat } from "../health/stores.js";
import { parseHeartbeat } from "../protocol/heartbeat.js";
import { cacheFileFor, writeCacheFile } from "./cache.js";

// The heartbeats the last `muster health` of the whole fleet read, per broker and collective, so
// that one run while the store cannot be read (no stream leader for a while after a broker's loss)
// still knows which nodes to ask, and how long each had been quiet then (health/read.ts
// BeatMemory). Kept in the user's cache directory (cache.ts), one JSON file per site. Each
// heartbeat is checked again as the store's are when it is read back; a file that does not parse
// is no memory. MUSTER_HEALTH_CACHE=off turns it off.

const none: BeatMemory = { recall: () => undefined, keep: () => undefined };
const enc = new TextEncoder();

export function healthMemory(site: { servers: readonly string[]; collective: string }, env: NodeJS.ProcessEnv = process.env, now = Date.now): BeatMemory {
  if (env.MUSTER_HEALTH_CACHE === "off" || env.MUSTER_HEALTH_CACHE === "0") return none;
  const file = cacheFileFor(env, "health", [[...site.servers].sort(), site.collective]);
  if (!file) return none;
  return {
    recall() {
      try {
        const saved = JSON.parse(readFileSync(file, "utf8")) as { at?: unknown; beats?: unknown };
        if (typeof saved.at !== "number" || !Array.isArray(saved.beats)) return undefined;
        const beats = new Map<string, Beat>();
        for (const b of saved.beats as unknown[]) {
          const e = b as { at?: unknown; heartbeat?: unknown };
          if (!e || typeof e.at !== "number" || e.at > saved.at) continue;
          const p = parseHeartbeat(enc.encode(JSON.stringify(e.heartbeat)));
          if (p.ok) beats.set(p.heartbeat.identity, { heartbeat: p.heartbeat, at: e.at });
        }
        return beats.size ? { at: saved.at, beats } : undefined;
      } catch {
        return undefined; // none yet, or unreadable: as without one
      }
    },
    keep(beats) {
      writeCacheFile(file, JSON.stringify({ at: now(), beats: [...beats.values()] })); // a failed write: the next read that cannot see asks nobody
    },
  };
}
