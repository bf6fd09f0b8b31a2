import type { FastifyInstance } from "fastify";
import { boardNode } from "../board.js";
import { countBy, page, parseColumns } from "../explorer.js";
import { ApiError, checkFilter, intParam } from "../http.js";
import type { RouteContext } from "./context.js";

// The fleet explorer (the registry's answer to a filter, paged, counted) and a node's page: what the
// registry, the provisioner, fleet health, the node's Puppet runs, its puppet agent and PuppetDB
// (its runs as PuppetDB recorded them) say of it.

export function fleetRoutes(app: FastifyInstance, { backend }: RouteContext): void {
  app.get("/api/nodes", async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const filter = q.filter ?? "";
    checkFilter(filter);
    let columns: string[];
    try {
      columns = parseColumns(q.columns);
    } catch (e) {
      throw new ApiError(400, "bad_request", (e as Error).message);
    }
    return page(await backend.registry.nodes(filter), columns, intParam(q.offset, 0, "offset"), intParam(q.limit, 200, "limit"));
  });

  app.get("/api/counts", async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const fact = (q.fact ?? "").trim();
    if (!fact) throw new ApiError(400, "bad_request", "fact= names the fact to count by (e.g. fact=os.family)");
    const filter = q.filter ?? "";
    checkFilter(filter);
    return { fact, counts: countBy(await backend.registry.nodes(filter), fact) };
  });

  app.get<{ Params: { identity: string } }>("/api/nodes/:identity", async (req) => {
    const id = req.params.identity;
    const soft = <T>(p: Promise<T>) => p.catch(() => null);
    // As /api/board: a console just started (or back from a broker outage) reads the bucket first,
    // so a node it has not caught up on yet is not reported unknown.
    const runs = async () => (await (await backend.sources?.puppetRuns())?.runs(id)) ?? [];
    // a node health knows to be unreachable is not asked (each question would wait out its
    // timeout): the page opens at once, with the last run health knows
    const known = backend.nodeHealth(id);
    const ask = known?.reachable !== false;
    const agent = (action: "last_run_summary" | "status" | "last_run_report") => (ask ? soft(backend.puppet(id, action)) : Promise.resolve(null));
    // PuppetDB's record of its runs, where the registry reaches one: null without, an error said
    const pdb = backend.puppetdbRuns(id).then(
      (r) => ({ runs: r, error: null }),
      (e: unknown) => ({ runs: null, error: (e as Error).message }),
    );
    const [node, summary, status, report, history, fromPuppetDb] = await Promise.all([soft(backend.registry.node(id)), agent("last_run_summary"), agent("status"), agent("last_run_report"), soft(runs()), pdb, backend.feed.whenReady(5000)]);
    const r = backend.feed.record(id);
    const health = backend.nodeHealth(id);
    if (!node && !r && !health) throw new ApiError(404, "not_found", `neither the registry, the provisioner nor fleet health knows ${JSON.stringify(id.slice(0, 253))}`);
    return {
      identity: id,
      registered: Boolean(node),
      registry_age_s: node?.age_seconds ?? null,
      facts: node?.facts ?? {},
      classes: node?.classes ?? [],
      agents: node?.agents ?? [],
      collectives: node?.collectives ?? [],
      health: health ?? null,
      provisioning: r ? boardNode(r) : null,
      puppet_runs: history ?? [],
      puppetdb: fromPuppetDb.runs?.puppetdb ?? null,
      puppetdb_runs: fromPuppetDb.runs?.runs ?? null,
      puppetdb_error: fromPuppetDb.error,
      last_run_summary: summary,
      puppet_status: status,
      last_run_report: report,
      /** Whether the node's puppet agent was asked (not when health says it is unreachable). */
      agent_asked: ask,
    };
  });
}
