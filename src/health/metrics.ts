import { Gauge, type Registry } from "prom-client";
import { ServiceRoles } from "../protocol/service.js";
import { ProblemKinds, type HealthReport } from "./model.js";
import { ServiceProblemKinds } from "./services.js";

// Health's Prometheus gauges (the console's /metrics): the same counts as the report's summaries,
// set from each report, so a dashboard and `muster health` never disagree.

/** Registers the gauges; the function returned sets them from a report. */
export function healthGauges(registry: Registry): (r: HealthReport) => void {
  const nodes = new Gauge({ name: "muster_health_nodes", help: "Nodes known to fleet health, by whether they are healthy", labelNames: ["state"], registers: [registry] });
  const problems = new Gauge({ name: "muster_health_problems", help: "Nodes with each problem (a node may have several)", labelNames: ["problem"], registers: [registry] });
  const services = new Gauge({ name: "muster_health_services", help: "The site's services, by role and whether they are healthy (the sum over roles: muster health's service summary)", labelNames: ["role", "state"], registers: [registry] });
  const serviceProblems = new Gauge({ name: "muster_health_service_problems", help: "Services with each problem: down, unobserved, failing", labelNames: ["problem"], registers: [registry] });
  const degraded = new Gauge({ name: "muster_health_view_degraded", help: "1 while the console's view cannot see (nobody is marked unreachable meanwhile, alerts are held), else 0", registers: [registry] });
  return (r) => {
    nodes.set({ state: "healthy" }, r.summary.healthy);
    nodes.set({ state: "unhealthy" }, r.summary.unhealthy);
    for (const k of ProblemKinds) problems.set({ problem: k }, r.summary[k]);
    for (const role of ServiceRoles) {
      const of = r.services.filter((s) => s.role === role);
      services.set({ role, state: "healthy" }, of.filter((s) => s.problems.length === 0).length);
      services.set({ role, state: "unhealthy" }, of.filter((s) => s.problems.length > 0).length);
    }
    for (const k of ServiceProblemKinds) serviceProblems.set({ problem: k }, r.service_summary[k]);
    degraded.set(r.view.degraded ? 1 : 0);
  };
}
