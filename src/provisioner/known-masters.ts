import { retryTransient, RevisionConflict, type Bucket } from "../broker/bucket.js";
import { decodeKnownMasters, encodeKnownMasters, KNOWN_MASTERS_KEY, mergeSeen, type KnownMaster } from "../protocol/known-masters.js";

// The masters the provisioners have seen, in the state bucket beside the node records
// (protocol/known-masters.ts has the value and its rules): ProvisionState's `masters`, so the
// bucket keeps one owner. Every write is a compare-and-set on the value read, merged again when
// another provisioner wrote first, so two provisioners seeing different masters lose neither.
// docs/provisioner.md#each-node-on-its-regions-master.

/** Seconds a bucket operation is retried through a broker outage or a leader election (as for records). */
const TRANSIENT_MS = 20_000;

export class KnownMasterStore {
  constructor(
    private readonly bucket: Bucket,
    private readonly onInvalid: (key: string, reason: string) => void,
  ) {}

  /** The masters seen (none when the value is missing, or is not one: said through onInvalid). */
  async list(): Promise<KnownMaster[]> {
    return (await this.read()).masters;
  }

  /** Remembers the masters that answered now (their criterion facts); writes only when one is new or changed. Resolves with what was written. */
  remember(seen: readonly { identity: string; facts: Record<string, unknown> }[], criteria: readonly string[], now = Date.now()): Promise<KnownMaster[] | undefined> {
    return this.change((known) => mergeSeen(known, seen, criteria, now));
  }

  /** Forgets one master (decommissioned): true when it was known. */
  async forget(identity: string): Promise<boolean> {
    return (await this.change((known) => (known.some((m) => m.identity === identity) ? known.filter((m) => m.identity !== identity) : undefined))) !== undefined;
  }

  private async read(): Promise<{ masters: KnownMaster[]; revision: number }> {
    const e = await retryTransient(() => this.bucket.get(KNOWN_MASTERS_KEY), TRANSIENT_MS);
    if (!e || e.value.length === 0) return { masters: [], revision: 0 };
    const v = decodeKnownMasters(e.value);
    if (!v.ok) this.onInvalid(KNOWN_MASTERS_KEY, v.reason);
    return { masters: v.ok ? v.masters : [], revision: e.revision };
  }

  /** `change` applied to the value read (undefined: nothing to change) and written by compare-and-set; read and changed again when someone wrote first. */
  private async change(change: (known: KnownMaster[]) => KnownMaster[] | undefined): Promise<KnownMaster[] | undefined> {
    for (let attempt = 0; ; attempt++) {
      const { masters, revision } = await this.read();
      const next = change(masters);
      if (!next) return undefined;
      const data = encodeKnownMasters(next);
      try {
        // a value that is not one is overwritten, still compare-and-set on the revision read
        await retryTransient(() => (revision === 0 ? this.bucket.create(KNOWN_MASTERS_KEY, data) : this.bucket.update(KNOWN_MASTERS_KEY, data, revision)), TRANSIENT_MS);
        return next;
      } catch (e) {
        if (!(e instanceof RevisionConflict) || attempt >= 10) throw e;
      }
    }
  }
}
