import type { FastifyInstance } from "fastify";
import { boardNode, type BoardNode } from "../board.js";
import { ApiError, openStream } from "../http.js";
import type { AuditedAction, RouteContext } from "./context.js";

// The provisioning board: records, their live stream, failure groups and progress, and the
// operators' actions on them (retry one node, a group or a master's; forget a gone node).

const identityTarget = (req: { params: unknown }) => String((req.params as { identity?: string }).identity ?? "").slice(0, 253);

/** A group retry's body: `group` (an id) and/or `master` (a name; "" for nodes without one). */
export function groupSelection(body: unknown): { group?: string; master?: string } {
  const b = (body ?? {}) as Record<string, unknown>;
  const out: { group?: string; master?: string } = {};
  if (typeof b.group === "string" && /^[0-9a-f]{1,64}$/.test(b.group)) out.group = b.group;
  if (typeof b.master === "string" && b.master.length <= 253) out.master = b.master;
  return out;
}

function groupTarget(body: unknown): string {
  const s = groupSelection(body);
  return [s.group !== undefined ? `group:${s.group}` : "", s.master !== undefined ? `master:${s.master || "(none)"}` : ""].filter(Boolean).join(" ") || "*";
}

export function boardRoutes(app: FastifyInstance, { backend, need }: RouteContext): void {
  const { feed, insights } = backend;
  app.get("/api/board", async () => {
    await feed.whenReady(5000);
    return { nodes: feed.snapshot() };
  });

  app.get("/api/board/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const snapshot = () => sse.send("snapshot", { nodes: feed.snapshot() });
    const node = (n: BoardNode) => sse.send("node", n);
    const remove = (identity: string) => sse.send("remove", { identity });
    const failures = (groups: unknown) => sse.send("failures", { groups });
    const progress = (p: unknown) => sse.send("progress", p);
    sse.send("status", backend.status);
    if (feed.ready) {
      snapshot();
      failures(insights.failures());
      progress(insights.progress());
    }
    feed.on("snapshot", snapshot);
    feed.on("node", node);
    feed.on("remove", remove);
    insights.on("failures", failures);
    insights.on("progress", progress);
    const offStatus = backend.onStatus((s) => sse.send("status", s));
    sse.onClose(() => {
      feed.off("snapshot", snapshot);
      feed.off("node", node);
      feed.off("remove", remove);
      insights.off("failures", failures);
      insights.off("progress", progress);
      offStatus();
    });
  });

  const retryAudit: AuditedAction = { action: "retry", target: identityTarget };
  app.post<{ Params: { identity: string } }>("/api/board/:identity/retry", { preHandler: need("operator", retryAudit) }, async (req) => {
    await backend.actions.retry(req.params.identity, req.auth.principal!);
    return { ok: true };
  });

  const forgetAudit: AuditedAction = { action: "forget", target: identityTarget };
  app.post<{ Params: { identity: string } }>("/api/board/:identity/forget", { preHandler: need("operator", forgetAudit) }, async (req) => {
    await backend.actions.forget(req.params.identity, req.auth.principal!);
    return { ok: true };
  });

  app.get("/api/failures", async () => {
    await feed.whenReady(5000);
    return { groups: insights.failures() };
  });

  const groupAudit: AuditedAction = { action: "retry_group", target: (req) => groupTarget(req.body), data: (req) => groupSelection(req.body) };
  app.post("/api/failures/retry", { preHandler: need("operator", groupAudit) }, async (req) => {
    const sel = groupSelection(req.body);
    if (sel.group === undefined && sel.master === undefined) throw new ApiError(400, "bad_request", "name a failure group (group: its id from GET /api/failures) or a master (master: its name), or both");
    const r = await backend.actions.retryGroup(sel, req.auth.principal!);
    return { retried: r.retried.length, changed: r.changed.length, nodes: r.retried, changed_nodes: r.changed };
  });

  app.get("/api/progress", async () => {
    await feed.whenReady(5000);
    return insights.progress(true);
  });

  app.get("/api/progress/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const progress = (p: unknown) => sse.send("progress", p);
    if (feed.ready) progress(insights.progress());
    insights.on("progress", progress);
    sse.onClose(() => insights.off("progress", progress));
  });

  app.get<{ Params: { identity: string } }>("/api/board/:identity", async (req) => {
    await feed.whenReady(5000);
    const r = feed.record(req.params.identity);
    if (!r) throw new ApiError(404, "not_found", `the provisioner has no record of ${JSON.stringify(req.params.identity.slice(0, 253))}`);
    return boardNode(r);
  });
}
