import type { Logger } from "pino";
import type { MusterClient } from "../client/client.js";
import type { Filter } from "../protocol/types.js";
import { verifyMessage } from "../protocol/signing.js";
import type { Bucket } from "../broker/bucket.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../protocol/buckets.js";
import { encodeNodeKeyEntry, nodeKeyName, type NodeKeyEntry } from "../protocol/node-keys.js";
import type { ProvisionerConfig } from "./config.js";
import type { ActionReply, CallOptions, Collective, Role, StartupEvent } from "./collective.js";

// The Collective of the engine over the MusterClient: the only provisioner file that talks to the
// collective, and only through the client's API (no raw connection).

export class MusterCollective implements Collective {
  private readonly clients: Record<Role, MusterClient>;

  constructor(
    client: MusterClient,
    cfg: Pick<ProvisionerConfig, "collective" | "target" | "master" | "notify">,
    private readonly log: Logger,
  ) {
    this.clients = {
      target: client.withCollective(cfg.target.collective ?? cfg.collective),
      master: client.withCollective(cfg.master.collective ?? cfg.collective),
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

  async call(role: Role, agent: string, action: string, data: Record<string, unknown>, opts: CallOptions): Promise<ActionReply[]> {
    // Signatures are checked here, at the edge; whose key it should be is the runner's question (its pins).
    // Replies the client dropped (bad signature, not the directory's key) go to the runner unsigned,
    // after any valid one, so it refuses, logs and counts them as its own checks would.
    const dropped: ActionReply[] = [];
    const res = await this.clients[role].call(agent, action, data, { ...opts, onRejected: (r) => dropped.push({ sender: r.sender, statuscode: r.statuscode, statusmsg: r.statusmsg, data: r.data }) });
    return [...res.replies.map((r) => ({ sender: r.sender, statuscode: r.statuscode, statusmsg: r.statusmsg, data: r.data, signedBy: verifyMessage(r) ? r.pubkey : undefined })), ...dropped];
  }

  onStartup(handler: (ev: StartupEvent) => void): () => void {
    // Checked by the protocol's parser: a garbled or ill-typed event is counted and dropped.
    const sub = this.clients.target.onLifecycle((ev) => handler({ identity: ev.identity, collectives: ev.collectives, time: ev.time, signedBy: verifyMessage(ev) ? ev.pubkey : undefined }), {
      type: "startup",
      onInvalid: (reason, subject) => this.log.debug({ reason, subject }, "ignored a garbled lifecycle event"),
    });
    return () => sub.unsubscribe();
  }

}
