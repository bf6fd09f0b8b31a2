import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import type { PuppetDb } from "../../../puppetdb/http.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caRpcError, puppetDbFor, type PuppetcaDeps } from "../settings.js";

// puppetca#deactivate: `puppet node deactivate CERTNAME` done by the master's muster server. The
// master already holds what PuppetDB trusts with writes (its certificate; PuppetDB receives its
// facts, catalogs and reports), so decommission asks the masters, in the same signed request and
// policy checks as clean, and no operator needs PuppetDB's port.

type NodeState = "active" | "deactivated" | "expired" | "unknown";

async function stateOf(db: PuppetDb, certname: string): Promise<NodeState> {
  const n = (await db.get(`/pdb/query/v4/nodes/${encodeURIComponent(certname)}`)) as { deactivated?: unknown; expired?: unknown } | undefined;
  if (n === undefined) return "unknown";
  if (n.deactivated) return "deactivated";
  if (n.expired) return "expired";
  return "active";
}

export function deactivate(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "deactivate">> {
  return async (input, ctx) => {
    try {
      const dbs = puppetDbFor({ ...deps.config, ...ctx.config }, ctx.identity);
      if (!dbs) return { certname: input.certname, puppetdb: null, deactivated: false, previous_state: null };
      // server_urls in order, as the terminus fails over: the first that answers
      let lastError: unknown;
      for (const db of dbs) {
        let previous: NodeState;
        try {
          previous = await stateOf(db, input.certname);
        } catch (e) {
          lastError = e;
          continue;
        }
        if (previous === "unknown" || previous === "deactivated") return { certname: input.certname, puppetdb: db.url, deactivated: false, previous_state: previous };
        const now = new Date().toISOString();
        const r = await db.command("deactivate node", 3, input.certname, { certname: input.certname, producer_timestamp: now }, { waitSeconds: 30 });
        const after = await stateOf(db, input.certname);
        if (after !== "deactivated") throw new RpcError(Status.Aborted, `PuppetDB at ${db.url} took the deactivate command (${r.uuid}) but still lists ${input.certname} as ${after}${r.processed ? "" : " (it had not processed the command after 30 s)"}`);
        ctx.log.info({ certname: input.certname, puppetdb: db.url, previous }, "node deactivated in PuppetDB");
        return { certname: input.certname, puppetdb: db.url, deactivated: true, previous_state: previous };
      }
      throw lastError;
    } catch (e) {
      throw caRpcError(e);
    }
  };
}
