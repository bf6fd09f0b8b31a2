import type { FastifyInstance } from "fastify";
import { ApiError, checkFilter, openStream } from "../http.js";
import type { AuditedAction, RouteContext } from "./context.js";

// Puppet runs: every runall (from the CLI or the console, kept in the runall history stream), one
// run's per-node results, the preview of how many nodes a filter runs on, and starting one.

export function runallRoutes(app: FastifyInstance, { backend, cfg, need }: RouteContext): void {
  app.get("/api/runall", async () => ({ runs: backend.runs.list(), confirm_above: cfg.runall.confirm_above }));

  app.get("/api/runall/preview", async (req) => {
    const filter = (req.query as Record<string, string | undefined>).filter ?? "";
    checkFilter(filter);
    const nodes = await backend.registry.nodes(filter);
    return { filter, matches: nodes.filter((n) => n.agents?.includes("puppet")).length, confirm_above: cfg.runall.confirm_above };
  });

  app.get("/api/runall/events", async (req, reply) => {
    const sse = openStream(req, reply);
    for (const r of backend.runs.list()) sse.send("run", r);
    sse.onClose(backend.onRun((r) => sse.send("run", r)));
  });

  app.get<{ Params: { id: string } }>("/api/runall/:id", async (req) => {
    const run = backend.runs.get(req.params.id);
    const results = run && (await backend.runResults(req.params.id));
    if (!run || !results) throw new ApiError(404, "not_found", `no run ${JSON.stringify(req.params.id.slice(0, 64))} here (runs are kept 30 days in the runall history)`);
    return { run, results };
  });

  const runallAudit: AuditedAction = {
    action: "runall",
    target: (req) => {
      const b = (req.body ?? {}) as Record<string, unknown>;
      return typeof b.filter === "string" && b.filter.trim() ? b.filter.trim().slice(0, 4096) : "(every node)";
    },
    data: (req) => {
      const b = (req.body ?? {}) as Record<string, unknown>;
      return { filter: typeof b.filter === "string" ? b.filter.slice(0, 4096) : "", concurrency: typeof b.concurrency === "number" ? b.concurrency : null };
    },
  };
  app.post("/api/runall", { preHandler: need("operator", runallAudit) }, async (req) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const filter = typeof body.filter === "string" ? body.filter : "";
    const concurrency = body.concurrency;
    if (typeof concurrency !== "number" || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > 10_000) throw new ApiError(400, "bad_request", "concurrency must be a whole number from 1 to 10000");
    checkFilter(filter);
    const confirmed = typeof body.confirm === "number" && Number.isInteger(body.confirm) ? body.confirm : undefined;
    return { id: await backend.actions.startRunall(filter, concurrency, req.auth.principal!, confirmed) };
  });
}
