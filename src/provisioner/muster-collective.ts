import type { Logger } from "pino";
import type { Bucket } from "../broker/bucket.js";
import type { MusterClient } from "../client/client.js";
import type { ActionName, ActionOutput, AgentDDL, CallInput } from "../ddl/types.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../protocol/buckets.js";
import { encodeNodeKeyEntry, nodeKeyName, type NodeKeyEntry } from "../protocol/node-keys.js";
import { verifyMessage } from "../protocol/signing.js";
import { Status } from "../protocol/status.js";
import type { Filter } from "../protocol/types.js";
import type { ActionReply, AgentRef, CallOptions, Collective, NodeEvent, Role } from "./collective.js";
import type { ProvisionerConfig } from "./config.js";

// The Collective of the engine over the MusterClient: the only provisioner file that talks to the
// collective, and only through the client's API (no raw connection), every call through the
// agent's typed client.

export class MusterCollective implements Collective {
  private readonly clients: Record<Role, MusterClient>;
  private readonly requireVerified: boolean;

  constructor(
    client: MusterClient,
    cfg: Pick<ProvisionerConfig, "collective" | "target" | "master" | "notify">,
    private readonly log: Logger,
  ) {
    // A reply reaches us only once the client has checked its signature: `signedBy` below is then the key that signed it.
    if (!client.verifies) throw new Error("the provisioner's client must verify reply signatures (verify: true)");
    this.requireVerified = cfg.master.require_verified;

    this.clients = {
      target: client.withCollective(cfg.target.collective ?? cfg.collective),
      // master.require_verified: a master's replies are checked against the key directory, which
      // the provisioner's own client leaves out (it holds waiting nodes to its pins)
      master: (cfg.master.require_verified ? client.withKeyDirectory() : client).withCollective(cfg.master.collective ?? cfg.collective),
      notify: client.withCollective(cfg.notify.collective ?? cfg.collective),
    };
  }

  private nodeKeys?: Promise<Bucket>;

  async publishNodeKey(entry: NodeKeyEntry): Promise<void> {
    this.nodeKeys ??= this.clients.target.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 5 } });
    this.nodeKeys.catch(() => (this.nodeKeys = undefined)); // try again next time
    await (await this.nodeKeys).put(nodeKeyName(entry.identity), encodeNodeKeyEntry(entry));
  }

  collectiveOf(role: Role): string {
    return this.clients[role].collective;
  }

  discover(role: Role, filter: Filter, timeoutMs: number): Promise<string[]> {
    return this.clients[role].discover({ filter, timeoutMs });
  }

  async call<D extends AgentDDL, A extends ActionName<D>>(role: Role, agent: AgentRef<D>, action: A, input: CallInput<D, A>, opts: CallOptions): Promise<ActionReply<ActionOutput<D, A>>[]> {
    // Signatures are checked by the client before a reply is kept; whose key it should be is the
    // provisioner's question (its pins, trust.ts). Replies the client dropped (bad signature, not
    // the directory's key) go to it unsigned, after any valid one, so it refuses, logs and counts
    // them as its own checks would. A master's or notifier's has no pin to be checked against: it
    // comes back refused here, never as the answer it claimed.
    const dropped: ActionReply<ActionOutput<D, A>>[] = [];
    const refuse = (r: { sender: string; data: unknown }, why: string): ActionReply<ActionOutput<D, A>> => {
      this.log.warn({ role, sender: r.sender, action: `${agent.name}#${action}` }, `refused a reply claiming to be from ${r.sender}: ${why}`);
      return { sender: r.sender, statuscode: Status.Aborted, statusmsg: `refused: the reply claiming to be from ${r.sender} ${why}`, data: r.data as ActionOutput<D, A> };
    };
    const res = await this.clients[role].agent(agent.ddl, { name: agent.name }).call(action, input, {
      ...opts,
      onRejected: (r, why) => dropped.push(role === "target" ? { sender: r.sender, statuscode: r.statuscode, statusmsg: r.statusmsg, data: r.data as ActionOutput<D, A> } : refuse(r, `was dropped: ${why}`)),
    });
    // master.require_verified: a master's word (a certificate signed, cleaned) counts only when the
    // key directory names the key that signed it (docs/security.md#keys-and-the-trust-store)
    const unverified = new Set(role === "master" && this.requireVerified ? res.unverified : []);
    return [
      ...res.replies.map((r) =>
        unverified.has(r.sender) ? refuse(r, "does not verify: the key directory has no key for it (master.require_verified)") : { sender: r.sender, statuscode: r.statuscode, statusmsg: r.statusmsg, data: r.data, signedBy: r.signature !== undefined && typeof r.pubkey === "string" ? r.pubkey : undefined },
      ),
      ...dropped,
    ];
  }

  onLifecycle(handler: (ev: NodeEvent) => void): () => void {
    // Checked by the protocol's parser: a garbled or ill-typed event is counted and dropped.
    const sub = this.clients.target.onLifecycle((ev) => handler({ type: ev.type, identity: ev.identity, collectives: ev.collectives, time: ev.time, signedBy: verifyMessage(ev) ? ev.pubkey : undefined }), {
      type: "*",
      onInvalid: (reason, subject) => this.log.debug({ reason, subject }, "ignored a garbled lifecycle event"),
    });
    return () => sub.unsubscribe();
  }
}
