import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import { boardNode, boardOrder, type BoardNode } from "./board.js";
import type { NodeRecord } from "../protocol/provision-record.js";
import type { ProvisionState } from "../provisioner/state.js";

// The console's live state: the provisioner's records followed through a ProvisionState watch (one
// for the whole process, fanned out to every browser), and whether the console reaches the broker
// and the registry (its status; the fleet's health is src/health/feed.ts).

export interface ConsoleStatus {
  broker: { ok: boolean; error?: string };
  registry: { ok: boolean; error?: string };
  /** Telling the admins: not ok while the last delivery failed (why, since when); absent before any. */
  alerts?: { ok: boolean; error?: string; since?: string };
}

/**
 * Every node's board row, kept current by a watch on the state bucket. Emits `node` (BoardNode)
 * per change, `remove` (identity) when a record is purged, and `snapshot` when the whole board
 * was re-read (after the broker came back).
 */
export class BoardFeed extends EventEmitter {
  private readonly records = new Map<string, NodeRecord>();
  private watch: { stop(): void } | undefined;
  private generation = 0;
  private caughtUp = false;
  private readyWaiters: (() => void)[] = [];
  /** Why the board is not available (no bucket yet, the watch failed), for /api/status. */
  problem: string | undefined = "not connected to the broker yet";

  constructor(
    /** The records' bucket name, for messages. */
    private readonly bucket: string,
    private readonly log: Logger,
  ) {
    super();
    this.setMaxListeners(0); // one listener per open event stream
  }

  get ready(): boolean {
    return this.caughtUp;
  }

  /** Resolves once the watch has delivered every current record (or at once if it has). */
  whenReady(timeoutMs: number): Promise<boolean> {
    if (this.caughtUp) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs);
      this.readyWaiters.push(() => {
        clearTimeout(t);
        resolve(true);
      });
    });
  }

  snapshot(now = Date.now()): BoardNode[] {
    return [...this.records.values()].map((r) => boardNode(r, now)).sort(boardOrder);
  }

  record(identity: string): NodeRecord | undefined {
    return this.records.get(identity);
  }

  /** Every record as last seen (failure groups and progress are computed from them). */
  allRecords(): IterableIterator<NodeRecord> {
    return this.records.values();
  }

  /** (Re)starts following the records (opened by `open`): the board is read afresh, then `snapshot` is emitted. */
  async start(open: () => Promise<ProvisionState | undefined>): Promise<void> {
    this.stop();
    const gen = ++this.generation;
    let state: ProvisionState | undefined;
    try {
      state = await open();
    } catch (e) {
      this.problem = `cannot open the state bucket ${this.bucket}: ${(e as Error).message}`;
      throw e;
    }
    if (gen !== this.generation) return;
    if (!state) {
      // No provisioner has run yet: an empty board, and the health check retries later.
      this.problem = `no state bucket ${this.bucket} yet (no provisioner has run against this broker, or state_bucket differs)`;
      this.records.clear();
      this.markReady();
      this.emit("snapshot");
      return;
    }
    const w = await state.watch();
    if (gen !== this.generation) {
      w.stop();
      return;
    }
    this.watch = w;
    this.problem = undefined;
    const fresh = new Map<string, NodeRecord>();
    let live = false;
    const finishSnapshot = () => {
      live = true;
      this.records.clear();
      for (const [k, v] of fresh) this.records.set(k, v);
      this.markReady();
      this.emit("snapshot");
    };
    void (async () => {
      try {
        for await (const c of w) {
          if (c.type === "caught-up") {
            if (!live) finishSnapshot();
            continue;
          }
          const target = live ? this.records : fresh;
          // a value that is not a record reads as removed: skipped, as the provisioner skips it
          if (c.type === "put") {
            target.set(c.key, c.record);
            if (live) this.emit("node", boardNode(c.record));
          } else if (target.delete(c.key) && live) {
            this.emit("remove", c.key);
          }
        }
      } catch (err) {
        if (gen === this.generation) {
          this.problem = `the watch on ${this.bucket} stopped: ${(err as Error).message}`;
          this.log.warn({ err: (err as Error).message }, "state bucket watch stopped");
        }
      }
    })();
  }

  stop(): void {
    this.generation++;
    this.watch?.stop();
    this.watch = undefined;
  }

  private markReady(): void {
    this.caughtUp = true;
    for (const w of this.readyWaiters.splice(0)) w();
  }
}

const PROBE_TIMEOUT_MS = 2500;

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} did not answer within ${ms / 1000}s`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e instanceof Error ? e : new Error(String(e)))),
    );
  });
}

/** Probes the broker with a JetStream API call (`ask`, e.g. opening the records), bounded in time. */
export async function probeBroker(ask: (() => Promise<unknown>) | undefined, where: string): Promise<ConsoleStatus["broker"]> {
  if (!ask) return { ok: false, error: `not connected to the broker at ${where} yet; is nats-server running?` };
  try {
    await withTimeout(ask(), PROBE_TIMEOUT_MS, `the broker at ${where}`);
    return { ok: true };
  } catch (e) {
    return { ok: false, error: `${(e as Error).message} (broker ${where}); the console reconnects by itself` };
  }
}

export function sameStatus(a: ConsoleStatus, b: ConsoleStatus): boolean {
  return a.broker.ok === b.broker.ok && a.broker.error === b.broker.error && a.registry.ok === b.registry.ok && a.registry.error === b.registry.error && a.alerts?.ok === b.alerts?.ok && a.alerts?.error === b.alerts?.error;
}
