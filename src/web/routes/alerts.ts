import type { FastifyInstance } from "fastify";
import { alertActionBody } from "../actions.js";
import { intParam } from "../http.js";
import type { AuditedAction, RouteContext } from "./context.js";

// The admins' alerts (docs/fleet.md#alerts): what is open, who was told or why nobody was, which
// nodes are silenced, how the last delivery went, the history; and the operators' actions on them
// (acknowledge, silence a node for a stated time, end a silence, a test alert), each audited, a
// viewer's and a forged (no CSRF token) one refused and recorded.

export function alertRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  app.get("/api/alerts", async (req) => {
    const q = req.query as Record<string, string | undefined>;
    return backend.alertsView(intParam(q.history, 200, "history"));
  });

  const body = (req: { body: unknown }) => alertActionBody(req.body);
  const named = (req: { body: unknown }) => {
    const b = body(req);
    return b.alert ?? b.identity ?? "";
  };
  const ackAudit: AuditedAction = { action: "alerts.ack", target: named, data: (req) => ({ ...body(req) }) };
  app.post("/api/alerts/ack", { preHandler: need("operator", ackAudit) }, async (req) => ({ acknowledged: await backend.actions.ackAlert(body(req), req.auth.principal!) }));

  const silenceAudit: AuditedAction = { action: "alerts.silence", target: named, data: (req) => ({ ...body(req) }) };
  app.post("/api/alerts/silence", { preHandler: need("operator", silenceAudit) }, async (req) => backend.actions.silence(body(req), req.auth.principal!));

  const unsilenceAudit: AuditedAction = { action: "alerts.unsilence", target: named };
  app.post("/api/alerts/unsilence", { preHandler: need("operator", unsilenceAudit) }, async (req) => {
    await backend.actions.unsilence(body(req), req.auth.principal!);
    return { ok: true };
  });

  const testAudit: AuditedAction = { action: "alerts.test", target: () => "admins" };
  app.post("/api/alerts/test", { preHandler: need("operator", testAudit) }, async (req) => backend.actions.testAlert(body(req), req.auth.principal!));
}
