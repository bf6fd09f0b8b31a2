import Fastify, { type FastifyInstance } from "fastify";
import { Counter, Gauge, Histogram, Registry } from "prom-client";

// Prometheus metrics for the provisioner, served on a configurable port at /metrics.

export class ProvisionerMetrics {
  readonly registry = new Registry();
  readonly discovered = new Counter({ name: "muster_provisioner_discovered_total", help: "Nodes found waiting to be provisioned", registers: [this.registry] });
  readonly provisioned = new Counter({ name: "muster_provisioner_provisioned_total", help: "Nodes provisioned successfully", registers: [this.registry] });
  readonly failed = new Counter({ name: "muster_provisioner_failed_total", help: "Nodes marked failed after retries", registers: [this.registry] });
  readonly retries = new Counter({ name: "muster_provisioner_step_retries_total", help: "Step attempts that failed and were retried", labelNames: ["step"], registers: [this.registry] });
  readonly refused = new Counter({ name: "muster_provisioner_refused_total", help: "Replies and events refused: unsigned, bad signature, or signed by a key other than the node's pinned one", labelNames: ["kind"], registers: [this.registry] });
  readonly inFlight = new Gauge({ name: "muster_provisioner_in_flight", help: "Nodes being provisioned now", registers: [this.registry] });
  readonly stepDuration = new Histogram({ name: "muster_provisioner_step_duration_seconds", help: "Duration of successful steps", labelNames: ["step"], buckets: [0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900], registers: [this.registry] });
  private server?: FastifyInstance;

  async serve(host: string, port: number): Promise<string> {
    const app = Fastify({ logger: false });
    app.get("/metrics", async (_req, reply) => {
      reply.header("content-type", this.registry.contentType);
      return this.registry.metrics();
    });
    app.get("/healthz", async () => ({ ok: true }));
    const addr = await app.listen({ host, port });
    this.server = app;
    return addr;
  }

  async close(): Promise<void> {
    await this.server?.close();
  }
}
