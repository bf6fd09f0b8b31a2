import { notifyDDL } from "../agents/notify/ddl.js";
import type { MusterClient } from "../client/client.js";
import { buildFilter } from "../filter/index.js";
import { Status } from "../protocol/status.js";

// Telling the admins, as an ordinary client: the notify agent of the first notifier that answers
// discovery (agent `notify`, narrowed by a compound filter), with a dedupe key it keeps in KV so a
// repeat is not sent twice (agents/notify, docs/fleet.md#alerts). Notifiers are looked for again
// after a minute, or at once when the one used did not answer or none answered.

export interface AdminNotifierOptions {
  /** The notify agent's name (default notify). */
  agent?: string;
  /** A compound filter narrowing the notifiers. */
  select?: string;
  /** Recipients to pass; default the notifier's own. */
  recipients?: string[];
  timeoutMs?: number;
}

export class AdminNotifier {
  private found: { at: number; list: string[] } | undefined;

  constructor(
    private readonly client: MusterClient,
    private readonly o: AdminNotifierOptions = {},
  ) {}

  /** Resolves once the notifier delivered (or had delivered the key before), with the recipients that accepted it; rejects saying why not. */
  async send(subject: string, message: string, dedupeKey: string): Promise<{ notifier: string; duplicate: boolean; told: string[] }> {
    const agent = this.o.agent ?? "notify";
    if (!this.found || Date.now() - this.found.at > 60_000) {
      const list = await this.client.discover({ filter: buildFilter({ agent: [agent], select: this.o.select ? [this.o.select] : [] }), timeoutMs: 2000 });
      // an empty answer is not remembered: a notifier that was slow or not yet up is asked for again next time
      this.found = list.length ? { at: Date.now(), list } : undefined;
    }
    const notifier = this.found?.list[0];
    // a notifier that does not trust the caller's key drops the discovery unanswered: say so
    if (!notifier) throw new Error(`no notifier answered discovery (agent ${agent}${this.o.select ? `, ${this.o.select}` : ""}): the admins were not told. Check that a muster server hosts the ${agent} agent and trusts this caller's key (${this.client.key.name}) in its security.trusted_keys`);
    const res = await this.client.agent(notifyDDL, { name: agent }).call("send", { subject, message, dedupe_key: dedupeKey, ...(this.o.recipients?.length ? { recipients: this.o.recipients } : {}) }, { nodes: [notifier], timeoutMs: this.o.timeoutMs ?? 30_000 });
    const r = res.replies[0];
    if (!r) {
      this.found = undefined;
      throw new Error(`${notifier} did not answer`);
    }
    if (r.statuscode !== Status.OK) throw new Error(`${notifier}: ${r.statusmsg}`);
    if ((r.data.failed ?? 0) > 0 && !r.data.delivered) throw new Error(`${notifier} could not deliver: ${JSON.stringify(r.data.results ?? []).slice(0, 500)}`);
    const told = (Array.isArray(r.data.results) ? r.data.results : []).flatMap((x) => {
      const o = x as { recipient?: unknown; ok?: unknown };
      return o.ok === true && typeof o.recipient === "string" ? [o.recipient] : [];
    });
    return { notifier, duplicate: r.data.duplicate === true, told };
  }
}
