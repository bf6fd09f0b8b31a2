import type { FastifyInstance } from "fastify";
import type { HealthReport } from "../../health/model.js";
import { openStream } from "../http.js";
import type { RouteContext } from "./context.js";

// The fleet's health (the landing page): the whole report as `muster health --json` prints it,
// and a live stream of its summary and unhealthy nodes; the console's own status (broker,
// registry); the Prometheus gauges.

/** What the landing page needs: the summary and the unhealthy nodes (healthy ones are counted). */
export function healthView(r: HealthReport): { time: string; summary: HealthReport["summary"]; nodes: HealthReport["nodes"] } {
  return { time: r.time, summary: r.summary, nodes: r.nodes.filter((n) => n.problems.length > 0) };
}

export function healthRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  app.get("/api/health", async (_req, reply) => reply.type("application/json; charset=utf-8").send(backend.health.reportJson()));

  app.get("/api/health/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const send = (r: HealthReport) => sse.send("health", { ...healthView(r), problem: backend.health.problem ?? null });
    send(backend.health.report());
    sse.send("status", backend.status);
    backend.health.on("report", send);
    const offStatus = backend.onStatus((s) => sse.send("status", s));
    sse.onClose(() => {
      backend.health.off("report", send);
      offStatus();
    });
  });

  app.get("/api/status", async () => backend.status);

  app.get("/metrics", { preHandler: need("viewer") }, async (_req, reply) => {
    reply.header("content-type", backend.metrics.contentType);
    return backend.metrics.metrics();
  });
}
