import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AVOID_MS } from "../broker/liveness.js";
import type { MemberMemory } from "../broker/connect.js";
import { cacheBase, ensureCacheDir } from "./cache.js";

// The broker members that did not answer this user's last connects (host:port, when), so the next
// `muster` command tries the others first. A member powered off without a word (no RST) costs each
// connect that picks it the whole connect timeout (5 s) before the next is tried: during a broker's
// failover every other command paid it, and `muster health` run in a loop noticed a dead node 30-50 s
// after its cut instead of 25-30 s. A member is passed over for AVOID_MS (30 s) after it failed,
// as a daemon passes over one it left (liveness.ts), and tried again after that. Kept in the user's
// cache directory (cache.ts); MUSTER_BROKER_CACHE=off turns it off.

const FILE = "brokers-unanswered.json";

/** What is kept: members that failed within `keepMs` of `now`, less the one that answered. Pure. */
export function nextMemory(saved: ReadonlyMap<string, number>, failed: readonly string[], connected: string | undefined, now: number, keepMs = AVOID_MS): Map<string, number> {
  const out = new Map<string, number>();
  for (const [s, at] of saved) if (now - at < keepMs && at <= now) out.set(s, at);
  for (const s of failed) out.set(s, now);
  if (connected) out.delete(connected);
  return out;
}

function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  const saved = JSON.parse(text) as unknown;
  if (saved && typeof saved === "object" && !Array.isArray(saved)) {
    for (const [s, at] of Object.entries(saved as Record<string, unknown>)) if (typeof at === "number" && Number.isFinite(at)) out.set(s, at);
  }
  return out;
}

/** The memory of this user's CLI, or undefined where none is kept (no safe cache directory, or turned off). */
export function brokerMemory(env: NodeJS.ProcessEnv = process.env, now = Date.now): MemberMemory | undefined {
  if (env.MUSTER_BROKER_CACHE === "off" || env.MUSTER_BROKER_CACHE === "0") return undefined;
  const base = cacheBase(env);
  const dir = base && ensureCacheDir(base);
  if (!dir) return undefined;
  const file = join(dir, FILE);
  let saved = new Map<string, number>();
  try {
    saved = parse(readFileSync(file, "utf8"));
  } catch {
    // none yet, or unreadable: every member is tried in the usual order
  }
  const t = now();
  const recent = nextMemory(saved, [], undefined, t);
  return {
    recent,
    note(failed, connected) {
      if (!failed.length && !(connected && saved.has(connected))) return; // nothing changed: no write on the common path
      try {
        const next = nextMemory(saved, failed, connected, now());
        const tmp = `${file}.${process.pid}.tmp`;
        writeFileSync(tmp, JSON.stringify(Object.fromEntries(next)), { mode: 0o600 });
        renameSync(tmp, file);
      } catch {
        // a full disk or a read-only cache: the next command tries every member as usual
      }
    },
  };
}
