import type { FastifyInstance } from "fastify";
import { auditPage } from "../audit-view.js";
import { intParam } from "../http.js";
import type { RouteContext } from "./context.js";

// The audit (operators): the console's records and the nodes' audit stream. A viewer asking for
// it is refused, and the refusal is itself recorded.

export function auditRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  app.get("/api/audit", { preHandler: need("operator", { action: "read_audit", target: () => "audit" }) }, async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const limit = intParam(q.limit, 500, "limit");
    const { rows, sources } = await backend.auditRecords();
    return { ...auditPage(rows, { ...(q.user ? { user: q.user } : {}), ...(q.action ? { action: q.action } : {}), refused: q.refused === "true" || q.refused === "1", limit }), sources };
  });
}
