import type { FastifyInstance } from "fastify";
import type { HealthReport } from "../../health/model.js";
import { openStream } from "../http.js";
import type { RouteContext } from "./context.js";

// The site's health (the landing page): the whole report as `muster health --json` prints it, and
// a live stream of its view, its services, its summary and unhealthy nodes, plus every few seconds
// how fresh it is (so a stalled feed shows on the page, not only a changed one); the console's own
// status (broker, registry); the Prometheus gauges.

/** Seconds between freshness events on the stream. */
const FRESH_EVERY_MS = 5000;

/** What the landing page needs: the view, the services, the summary and the unhealthy nodes (healthy ones are counted). */
export function healthView(r: HealthReport): Pick<HealthReport, "time" | "view" | "services" | "service_summary" | "summary" | "nodes"> {
  return { time: r.time, view: r.view, services: r.services, service_summary: r.service_summary, summary: r.summary, nodes: r.nodes.filter((n) => n.problems.length > 0) };
}

export function healthRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  app.get("/api/health", async (_req, reply) => reply.type("application/json; charset=utf-8").send(backend.health.reportJson()));

  app.get("/api/health/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const send = (r: HealthReport) => sse.send("health", { ...healthView(r), problem: backend.health.problem ?? null });
    send(backend.health.report());
    sse.send("status", backend.status);
    backend.health.on("report", send);
    const fresh = setInterval(() => {
      const r = backend.health.report();
      sse.send("fresh", { time: r.time, view: r.view });
    }, FRESH_EVERY_MS);
    const offStatus = backend.onStatus((s) => sse.send("status", s));
    sse.onClose(() => {
      clearInterval(fresh);
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
