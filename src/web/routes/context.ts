import type { FastifyRequest, preHandlerAsyncHookHandler } from "fastify";
import type { Role } from "../auth.js";
import type { ConsoleBackend } from "../backend.js";
import type { WebConfig } from "../config.js";

// What each route group (routes/*.ts) is handed by the edge (server.ts): the backend, the config,
// and the guard that checks a role (and the CSRF token of a POST), recording refused actions.

/** What an action route records when it is refused before it runs: its name and its target. */
export interface AuditedAction {
  action: string;
  target(req: FastifyRequest): string;
  data?(req: FastifyRequest): Record<string, unknown>;
}

export interface RouteContext {
  backend: ConsoleBackend;
  cfg: WebConfig;
  need(role: Role, audited?: AuditedAction): preHandlerAsyncHookHandler;
}
