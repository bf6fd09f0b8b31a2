import type { ProvisionDDL } from "../agents/provision/ddl.js";
import type { ActionName, ActionOutput, CallInput } from "../ddl/types.js";
import { appendLog, Stages, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import { takenOverLine } from "./claim.js";

// The node's deploy lock (`provision#lock_deploy`), the whole policy in one place: the lock step
// takes it, a slow step renews it, the unlock step and a failure or abandon release it, and a
// takeover from a provisioner whose claim expired breaks the stale one and takes it again.
// Which of these apply is decided here by pure methods; the node is asked through `ask`.

/** One action of the node's provision agent (through its DDL); rejects on an error or a missing reply. `quiet`: not cut short by our shutdown, failures not logged. */
export type AskNode = <A extends ActionName<ProvisionDDL>>(identity: string, action: A, input: CallInput<ProvisionDDL, A>, opts?: { timeoutMs?: number; quiet?: boolean }) => Promise<ActionOutput<ProvisionDDL, A>>;

export interface DeployLockPolicy {
  /** The lock step is on. */
  enabled: boolean;
  owner: string;
  lockLeaseS: number;
  puppetTimeoutS: number;
}

export class DeployLock {
  constructor(
    private readonly policy: DeployLockPolicy,
    private readonly ask: AskNode,
  ) {}

  /** The lease covers one Puppet run beyond lock_lease; slow steps renew it when it runs short. */
  get leaseS(): number {
    return this.policy.lockLeaseS + this.policy.puppetTimeoutS;
  }

  /**
   * Take (or renew: the same call by the same owner) the lock; records when it expires. A lock
   * left by a provisioner that ran an earlier round of this node (or whose claim we took over) is
   * stale, since this round's claim is ours: it is broken and taken. Anyone else's is respected.
   */
  async take(rec: NodeRecord, leaseS = this.leaseS): Promise<number | undefined> {
    const input = { owner: this.policy.owner, lease: leaseS };
    const d = await this.ask(rec.identity, "lock_deploy", input).catch(async (e: unknown) => {
      const holder = lockHolder(e);
      if (!holder || !staleProvisionerLock(rec, holder, this.policy.owner)) throw e;
      appendLog(rec, `the deploy lock of ${holder}, which provisioned this node before and no longer holds its claim, is stale: broken and taken`);
      await this.ask(rec.identity, "unlock_deploy", { force: true });
      return this.ask(rec.identity, "lock_deploy", input);
    });
    rec.lockExpires = typeof d.expires === "number" ? d.expires : undefined;
    return rec.lockExpires;
  }

  /** Does the node hold a lock of ours? Past unlock it does not (and, disabled under isolation, it is out of reach). */
  holds(rec: NodeRecord): boolean {
    return this.policy.enabled && !pastStage(rec.stage, "unlock");
  }

  /** Before a slow step, when `lockNeedsRenewal` says so. */
  renew(rec: NodeRecord): Promise<number | undefined> {
    return this.take(rec);
  }

  /** The unlock step. */
  async unlock(rec: NodeRecord): Promise<void> {
    await this.ask(rec.identity, "unlock_deploy", { owner: this.policy.owner });
  }

  /** After a failure or on abandon: best effort, never waiting on our shutdown; a lock we cannot release expires with its lease. */
  async release(rec: NodeRecord, onError: (e: Error) => void): Promise<void> {
    if (!this.holds(rec)) return;
    await this.ask(rec.identity, "unlock_deploy", { owner: this.policy.owner }, { timeoutMs: 10_000, quiet: true }).catch((e: Error) => onError(e));
  }

  /** Must a takeover touch the lock? Only a node that got past the start, with the lock step on, and not yet disabled. */
  takeoverNeeded(rec: NodeRecord, disabled: boolean): boolean {
    return this.policy.enabled && rec.stage !== undefined && !disabled;
  }

  /**
   * Taking over from a provisioner whose claim expired: its node lock may outlive its claim, and
   * the expired claim is the proof it is gone, so the lock is ours to take. Past unlock (or
   * disabled, which refuses new locks) it only needs the stale one gone.
   */
  async takeover(rec: NodeRecord): Promise<void> {
    await this.ask(rec.identity, "unlock_deploy", { force: true });
    if (!pastStage(rec.stage, "unlock")) await this.take(rec);
  }
}

/** Must the lock be taken again before a slow step? It must outlast one Puppet run; before the lock step ran there is none. */
export function lockNeedsRenewal(rec: NodeRecord, enabled: boolean, puppetTimeoutS: number, now: number): boolean {
  return enabled && rec.stage !== undefined && (rec.lockExpires ?? 0) - now < puppetTimeoutS * 1000;
}

/**
 * Is a lock held by `holder` one a provisioner left behind? It is when `holder` is not us and the
 * record names it as the provisioner of an earlier round (or of the claim we took over): its work on
 * the node ended when it wrote that round's end, or when its claim expired and we took the node.
 */
export function staleProvisionerLock(rec: NodeRecord, holder: string, self: string): boolean {
  if (holder === self) return false;
  if ((rec.history ?? []).some((h) => h.event === "started" && h.by === holder)) return true;
  const line = takenOverLine(holder);
  return rec.log.some((l) => l.includes(line));
}

/** The holder a refused lock_deploy names (its reply's data, as the provision agent sends it). */
function lockHolder(e: unknown): string | undefined {
  const data = (e as { data?: Record<string, unknown> }).data;
  return data?.locked === true && typeof data.owner === "string" ? data.owner : undefined;
}

/** Has the node completed `stage` (or one after it)? */
function pastStage(done: Stage | undefined, stage: Stage): boolean {
  return done !== undefined && Stages.indexOf(done) >= Stages.indexOf(stage);
}
