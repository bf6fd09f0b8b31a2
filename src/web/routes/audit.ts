import type { FastifyInstance } from "fastify";
import { auditPage } from "../audit-view.js";
import { intParam } from "../http.js";
import type { RouteContext } from "./context.js";

// The audit (operators): the audit stream (the nodes', the CLI's and the console's own records) and
// the console's file. Reads are left out unless `reads=1`. A viewer asking for it is refused, and
// the refusal is itself recorded.

export function auditRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  app.get("/api/audit", { preHandler: need("operator", { action: "read_audit", target: () => "audit" }) }, async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const limit = intParam(q.limit, 500, "limit");
    const { rows, sources } = await backend.auditRecords();
    const yes = (v: string | undefined) => v === "true" || v === "1";
    return { ...auditPage(rows, { ...(q.user ? { user: q.user } : {}), ...(q.action ? { action: q.action } : {}), refused: yes(q.refused), reads: yes(q.reads), limit }), sources };
  });
}
