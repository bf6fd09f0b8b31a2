import type { Logger } from "pino";
import type { NodeKeyEntry, NodeKeySource } from "../protocol/node-keys.js";
import type { NodeRecord } from "../protocol/provision-record.js";
import type { ProvisionerMetrics } from "./metrics.js";
import { StepError } from "./steps.js";

// Which waiting node the provisioner believes: the key pinned per node and the replay window of
// startup events. The provisioner acts only on what a node signed with the key it pinned for that
// node (docs/security.md, the trust model): the first signed reply to a directed request pins the
// key (only the node can read its own subject under per-node bootstrap credentials), the node's
// record keeps it, and from then on a reply or startup event signed by another key is refused. The
// rules are pure functions; NodeTrust keeps the pins and says what it refused.

/** A startup event further than this from our clock is refused (a replay of an old one). */
export const STARTUP_EVENT_WINDOW_MS = 5 * 60_000;

/** Why a startup event may not be acted on, or undefined when it may: too far from our clock, or not newer than the last one taken. */
export function staleStartup(time: number | undefined, now: number, lastTaken: number | undefined, windowMs = STARTUP_EVENT_WINDOW_MS): string | undefined {
  if (time === undefined) return undefined;
  if (Math.abs(now - time) > windowMs) return `its time is more than ${windowMs / 1000}s from ours (stale or replayed)`;
  if (time <= (lastTaken ?? -1)) return "it is not newer than the last one taken (replayed)";
  return undefined;
}

/** Why a message claiming to be from `id` is refused, or undefined: unsigned, or signed by another key than the pinned one. */
export function refusal(id: string, pinned: string | undefined, signedBy: string | undefined): string | undefined {
  if (!signedBy) return "it is unsigned or its signature does not verify";
  if (pinned && signedBy !== pinned) return `it is signed by ${signedBy}, not by the key pinned for ${id} (${pinned})`;
  return undefined;
}

export interface NodeTrustOptions {
  /** The provisioner's id: who vouches for the keys it publishes. */
  by: string;
  log: Logger;
  metrics?: ProvisionerMetrics;
  /** Vouch for a node's key in the directory clients check replies against. */
  publish?: (entry: NodeKeyEntry) => Promise<void>;
}

export class NodeTrust {
  /** Public keys pinned per node (also in each record's nodeKey). */
  private readonly pins = new Map<string, string>();
  /** The time of the last startup event taken per node: an older or equal one is a replay. */
  private readonly lastStartup = new Map<string, number>();

  constructor(private readonly o: NodeTrustOptions) {}

  pinOf(identity: string): string | undefined {
    return this.pins.get(identity);
  }

  has(identity: string): boolean {
    return this.pins.has(identity);
  }

  /**
   * The record is the pin's source of truth: none (never provisioned, or decommissioned: a new
   * machine may carry a new key) drops a pin held in memory; a record's key is pinned; a record
   * without one gets ours.
   */
  fromRecord(identity: string, rec: NodeRecord | undefined): void {
    if (!rec) this.pins.delete(identity);
    else if (rec.nodeKey) this.pins.set(identity, rec.nodeKey);
    else rec.nodeKey = this.pins.get(identity);
  }

  /** May this startup event be acted on? Refusals are logged and counted; a taken one moves the replay window. */
  takeStartup(ev: { identity: string; time?: number; signedBy?: string }, now: number): boolean {
    const stale = staleStartup(ev.time, now, this.lastStartup.get(ev.identity));
    if (stale) {
      this.o.metrics?.refused.inc({ kind: "event" });
      this.o.log.warn({ node: ev.identity, time: ev.time }, `refused a startup event claiming to be from ${ev.identity}: ${stale}`);
      return false;
    }
    // an unpinned node's signed event only brings it forward, as discovery would; it pins nothing
    if (this.pins.has(ev.identity) || !ev.signedBy) {
      try {
        this.authenticate(ev.identity, ev.signedBy, "startup event");
      } catch {
        return false; // logged and counted
      }
    }
    if (ev.time !== undefined) this.lastStartup.set(ev.identity, ev.time);
    return true;
  }

  /** A reply or event from a waiting node: throws StepError unless signed by its pinned key; the first signed one pins. */
  authenticate(id: string, signedBy: string | undefined, what: string): void {
    const pinned = this.pins.get(id);
    const why = refusal(id, pinned, signedBy);
    if (why) {
      this.o.metrics?.refused.inc({ kind: what.endsWith("event") ? "event" : "reply" });
      this.o.log.warn({ node: id, what, signedBy, pinned }, `refused a ${what} claiming to be from ${id}: ${why}`);
      throw new StepError(`${what} from ${id} refused: ${why}`);
    }
    if (!pinned) {
      this.pins.set(id, signedBy!);
      this.o.log.info({ node: id, pubkey: signedBy }, "pinned the node's key");
      this.publish(id, signedBy!, "pinned");
    }
  }

  /** The certificate just signed belongs to the holder of the pinned key: say so in the directory. */
  certified(identity: string, fingerprint: string | undefined): void {
    const pin = this.pins.get(identity);
    if (pin) this.publish(identity, pin, "certified", fingerprint);
  }

  /** Vouch for the node's key in the directory; a failure only delays that. */
  private publish(identity: string, pubkey: string, source: NodeKeySource, fingerprint?: string): void {
    if (!this.o.publish) return;
    this.o.publish({ identity, pubkey, source, time: Date.now(), by: this.o.by, ...(fingerprint ? { fingerprint } : {}) }).then(
      () => this.o.log.debug({ node: identity, pubkey, source }, "published the node's key"),
      (e: unknown) => this.o.log.warn({ node: identity, err: (e as Error).message }, "could not publish the node's key to the key directory"),
    );
  }
}
