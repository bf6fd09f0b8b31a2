import { Gauge, type Registry } from "prom-client";
import { ProblemKinds, type HealthReport } from "./model.js";

// Health's Prometheus gauges (the console's /metrics): the same counts as the report's summary,
// set from each report, so a dashboard and `muster health` never disagree.

/** Registers the gauges; the function returned sets them from a report. */
export function healthGauges(registry: Registry): (r: HealthReport) => void {
  const nodes = new Gauge({ name: "muster_health_nodes", help: "Nodes known to fleet health, by whether they are healthy", labelNames: ["state"], registers: [registry] });
  const problems = new Gauge({ name: "muster_health_problems", help: "Nodes with each problem (a node may have several)", labelNames: ["problem"], registers: [registry] });
  return (r) => {
    nodes.set({ state: "healthy" }, r.summary.healthy);
    nodes.set({ state: "unhealthy" }, r.summary.unhealthy);
    for (const k of ProblemKinds) problems.set({ problem: k }, r.summary[k]);
  };
}
