import { spawn } from "node:child_process";
import { accessSync, constants, existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseDDL } from "../ddl/index.js";
import type { AgentDDL } from "../ddl/types.js";
import { RpcError } from "../errors.js";
import { isStatusCode, Status } from "../protocol/status.js";
import type { Agent, ActionContext, ActionHandler } from "../agent/agent.js";

// External agents: `<dir>/<name>.json` (the DDL) beside an executable `<dir>/<name>` in any language.
// The executable reads one request as JSON on stdin and writes one reply as JSON on stdout:
//   stdin:  {"protocol":"muster/external/1","agent","action","data","requestid","caller","identity","config"}
//   stdout: {"statuscode":0,"statusmsg":"OK","data":{...}}   (statuscode/statusmsg optional)
// The DDL timeout is enforced by killing the process. Nothing runs through a shell.

export const EXTERNAL_PROTOCOL = "muster/external/1";
const MAX_OUTPUT = 4 * 1024 * 1024;

export function runExternal(executable: string, payload: unknown, ctx: ActionContext): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(executable, [], { stdio: ["pipe", "pipe", "pipe"], signal: ctx.signal, env: { ...process.env, MUSTER_AGENT: ctx.agent, MUSTER_ACTION: ctx.action } });
    const out: Buffer[] = [];
    let size = 0;
    let err = "";
    child.stdout.on("data", (d: Buffer) => {
      size += d.length;
      if (size > MAX_OUTPUT) child.kill("SIGKILL");
      else out.push(d);
    });
    child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    child.stdin.on("error", () => undefined); // the agent may exit without reading stdin
    child.once("error", (e) => {
      if ((e as Error).name === "AbortError") return reject(new RpcError(Status.Aborted, `external agent ${ctx.agent} was aborted`));
      reject(new RpcError(Status.UnknownError, `cannot run external agent ${executable}: ${e.message}`));
    });
    child.once("close", (code, signal) => {
      if (ctx.signal.aborted) return reject(new RpcError(Status.Aborted, `external agent ${ctx.agent} was aborted`));
      if (size > MAX_OUTPUT) return reject(new RpcError(Status.UnknownError, `external agent ${ctx.agent} wrote more than ${MAX_OUTPUT} bytes`));
      const text = Buffer.concat(out).toString("utf8").trim();
      let reply: unknown;
      try {
        reply = JSON.parse(text);
      } catch {
        return reject(new RpcError(Status.UnknownError, `external agent ${ctx.agent} exited ${code ?? signal} without a JSON reply${err ? `: ${err.trim()}` : ""}`));
      }
      if (!reply || typeof reply !== "object" || Array.isArray(reply)) return reject(new RpcError(Status.UnknownError, `external agent ${ctx.agent} replied with something other than a JSON object`));
      const r = reply as { statuscode?: unknown; statusmsg?: unknown; data?: unknown };
      const data = r.data && typeof r.data === "object" && !Array.isArray(r.data) ? (r.data as Record<string, unknown>) : {};
      const status = r.statuscode === undefined ? (code === 0 ? 0 : Status.UnknownError) : r.statuscode;
      if (!isStatusCode(status)) return reject(new RpcError(Status.UnknownError, `external agent ${ctx.agent} replied with invalid statuscode ${JSON.stringify(r.statuscode)}`));
      if (status !== 0) return reject(new RpcError(status, typeof r.statusmsg === "string" ? r.statusmsg : `failed with status ${status}`, data));
      resolve(data);
    });
    child.stdin.end(JSON.stringify(payload));
  });
}

export function externalAgent(ddl: AgentDDL, executable: string): Agent {
  const actions: Record<string, ActionHandler> = {};
  for (const action of Object.keys(ddl.actions)) {
    actions[action] = (input, ctx) =>
      runExternal(executable, { protocol: EXTERNAL_PROTOCOL, agent: ctx.agent, action, data: input, requestid: ctx.requestId, caller: ctx.caller, identity: ctx.identity, config: ctx.config }, ctx);
  }
  return { ddl, actions: actions as Agent["actions"] };
}

/** Load every `<name>.json` + executable `<name>` pair from a directory; bad ones are reported, not fatal. */
export function loadExternalAgents(dir: string): { agents: Agent[]; errors: string[] } {
  const agents: Agent[] = [];
  const errors: string[] = [];
  if (!existsSync(dir)) return { agents, errors: [`external agent directory ${dir} does not exist`] };
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
    const name = f.slice(0, -5);
    const exe = join(dir, name);
    try {
      const ddl = parseDDL(JSON.parse(readFileSync(join(dir, f), "utf8")) as unknown, join(dir, f));
      if (ddl.metadata.name !== name) throw new Error(`DDL names agent '${ddl.metadata.name}' but the file is ${f}`);
      accessSync(exe, constants.X_OK);
      agents.push(externalAgent(ddl, exe));
    } catch (e) {
      errors.push(`external agent ${name}: ${(e as Error).message}`);
    }
  }
  return { agents, errors };
}

