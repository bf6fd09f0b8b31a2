import { defineAgent, type Agent } from "../../agent/agent.js";
import { clean } from "./actions/clean.js";
import { deactivate } from "./actions/deactivate.js";
import { list } from "./actions/list.js";
import { revoke } from "./actions/revoke.js";
import { sign } from "./actions/sign.js";
import { status } from "./actions/status.js";
import { puppetcaDDL, type PuppetcaDDL } from "./ddl.js";
import { masterService } from "./service.js";
import type { PuppetcaDeps } from "./settings.js";

// The puppetca agent: the master side of provisioning. Settings are documented in settings.ts
// (confdir is usually enough: the master's puppet.conf names its ssldir, certname and port).
// It talks to the CA over its HTTP API with the master's own certificate (src/puppet/ca.ts), and
// with the same certificate to the PuppetDB of the master's puppetdb.conf (deactivate).

export type PuppetcaAgent = Agent<PuppetcaDDL>;

export function createPuppetcaAgent(deps: PuppetcaDeps = {}): PuppetcaAgent {
  const d: PuppetcaDeps = { config: { ...(deps.config ?? {}) } };
  return defineAgent({
    ddl: puppetcaDDL,
    actions: { list: list(d), sign: sign(d), clean: clean(d), revoke: revoke(d), status: status(d), deactivate: deactivate(d) },
    // the node hosting puppetca is a master: its heartbeat says whether puppetserver and the CA answer
    service: (() => {
      const svc = masterService();
      return (ctx) => svc({ ...ctx, config: { ...(d.config ?? {}), ...ctx.config } });
    })(),
  });
}
