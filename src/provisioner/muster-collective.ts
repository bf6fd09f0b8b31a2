import type { Logger } from "pino";
import type { MusterClient } from "../client/client.js";
import { decodeJson } from "../protocol/envelope.js";
import { subjects } from "../protocol/subjects.js";
import type { Filter } from "../protocol/types.js";
import type { ProvisionerConfig } from "./config.js";
import type { ActionReply, CallOptions, Collective, Role, StartupEvent } from "./collective.js";

// The Collective of the engine over today's MusterClient. The only provisioner file that talks to
// the client; the startup subscription is the only use of the raw connection, kept here until the
// client API offers lifecycle subscriptions.

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

  collectiveOf(role: Role): string {
    return this.clients[role].collective;
  }

  discover(role: Role, filter: Filter, timeoutMs: number): Promise<string[]> {
    return this.clients[role].discover({ filter, timeoutMs });
  }

  async call(role: Role, agent: string, action: string, data: Record<string, unknown>, opts: CallOptions): Promise<ActionReply[]> {
    return (await this.clients[role].call(agent, action, data, opts)).replies;
  }

  onStartup(handler: (ev: StartupEvent) => void): () => void {
    const sub = this.clients.target.nc.subscribe(subjects.lifecycle("startup", "*"), {
      callback: (err, msg) => {
        if (err) return;
        let ev: { identity?: unknown; collectives?: unknown };
        try {
          ev = decodeJson(msg.data) as typeof ev;
        } catch {
          this.log.debug("ignored a garbled lifecycle event");
          return;
        }
        if (typeof ev?.identity !== "string") return;
        handler({ identity: ev.identity, collectives: Array.isArray(ev.collectives) ? ev.collectives.filter((c): c is string => typeof c === "string") : undefined });
      },
    });
    return () => sub.unsubscribe();
  }
}
