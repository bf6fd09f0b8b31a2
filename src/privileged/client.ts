import { accessSync, constants } from "node:fs";
import { connect } from "node:net";
import { MusterError, type ErrorCode, ErrorCodes } from "../errors.js";
import type { CertificateRequest, PuppetRunResult } from "../puppet/agent.js";
import { PuppetAgent } from "../puppet/agent.js";
import { readLastRunReport, type ReportDetails } from "../puppet/report.js";
import type { PuppetResourceResult } from "../puppet/resource.js";
import { isPermissionError, puppetStateFile, puppetStatePaths, readStateText } from "../puppet/state.js";
import type { NodeOps } from "../agent/node-ops.js";
import type { OperationArgs, OperationName, Reply } from "./operations.js";

// The daemon's side of the privileged helper: each operation is one connection, one JSON line
// each way. The agent's settings stay here: the helper reads its own (docs/decisions/privileged-helper.md).
// Closing the connection (the request was cancelled) makes the helper stop the operation.

const MAX_REPLY_BYTES = 8 * 1024 * 1024;

/** One operation on the helper's socket. */
export function askHelper<O extends OperationName>(socketPath: string, op: O, args: OperationArgs<O>, signal?: AbortSignal): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new MusterError("MUSTER_PUPPET_FAILED", `${op} not started: the request was cancelled`));
    const sock = connect(socketPath);
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const done = (fn: () => void) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      sock.destroy();
      fn();
    };
    const onAbort = () => done(() => reject(new MusterError("MUSTER_PUPPET_FAILED", `${op} was cancelled`)));
    signal?.addEventListener("abort", onAbort, { once: true });
    sock.once("connect", () => sock.write(`${JSON.stringify({ op, args })}\n`));
    sock.on("data", (d: Buffer) => {
      size += d.length;
      if (size > MAX_REPLY_BYTES) return done(() => reject(new MusterError("MUSTER_PUPPET_FAILED", `the privileged helper's reply to ${op} is over ${MAX_REPLY_BYTES} bytes`)));
      chunks.push(d);
    });
    sock.once("error", (e: NodeJS.ErrnoException) =>
      done(() =>
        reject(
          ["ENOENT", "ECONNREFUSED", "EACCES"].includes(e.code ?? "")
            ? new MusterError("MUSTER_PRIVILEGED_UNREACHABLE", `the privileged helper at ${socketPath} does not answer (${e.code}): systemctl enable --now muster-privileged.socket, or fix privileged_helper in the server config`)
            : new MusterError("MUSTER_PRIVILEGED_UNREACHABLE", `the privileged helper at ${socketPath}: ${e.message}`),
        ),
      ),
    );
    sock.once("close", () =>
      done(() => {
        let reply: Reply;
        try {
          reply = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Reply;
        } catch {
          return reject(new MusterError("MUSTER_PRIVILEGED_UNREACHABLE", `the privileged helper at ${socketPath} closed the connection without a reply to ${op}`));
        }
        if (reply.ok) return resolve(reply.result);
        const code: ErrorCode = reply.refused ? "MUSTER_PRIVILEGED_REFUSED" : Object.hasOwn(ErrorCodes, reply.code) ? (reply.code as ErrorCode) : "MUSTER_PUPPET_FAILED";
        reject(new MusterError(code, reply.refused ? `the privileged helper refused ${op}: ${reply.error}` : reply.error));
      }),
    );
  });
}

/** The agents' operations through the helper at `socketPath`. */
export function helperOps(socketPath: string): NodeOps {
  const ask = <O extends OperationName>(op: O, args: OperationArgs<O>, signal?: AbortSignal) => askHelper(socketPath, op, args, signal);
  return {
    via: "helper",
    puppetRun: async (t, r) =>
      (await ask(
        "puppet.run",
        {
          agent: t.agent,
          ...(r.environment !== undefined ? { environment: r.environment } : {}),
          ...(r.noop !== undefined ? { noop: r.noop } : {}),
          ...(r.tags ? { tags: r.tags } : {}),
          ...(r.facts ? { facts: r.facts } : {}),
          ...(r.server !== undefined ? { server: r.server } : {}),
        },
        r.signal,
      )) as PuppetRunResult,
    puppetDaemonize: async (t) => (await ask("puppet.daemonize", { agent: t.agent })) as { pid: number; alreadyRunning: boolean },
    puppetDisable: async (t, message) => (await ask("puppet.disable", { agent: t.agent, message })) as { changed: boolean },
    puppetEnable: async (t) => (await ask("puppet.enable", { agent: t.agent })) as { changed: boolean },
    async certStatus(_t, o) {
      const r = (await ask("puppet.cert_status", { download: o.download }, o.signal)) as { hasCert: boolean; certFingerprint: string | null; csrFingerprint: string | null };
      return { hasCert: r.hasCert, certFingerprint: r.certFingerprint ?? undefined, csrFingerprint: r.csrFingerprint ?? undefined };
    },
    requestCertificate: async (_t, o) => (await ask("puppet.request_certificate", o.nodeKey ? { node_key: o.nodeKey } : {}, o.signal)) as CertificateRequest,
    setPuppetServer: async (_t, h) => (await ask("puppet.set_server", { host: h.host, ...(h.port !== undefined ? { port: h.port } : {}) })) as { server: string; puppetConf: string; hostsFile: string | null },
    tlsCredential: async () => (await ask("puppet.tls_credential", {})) as { cert: string; key: string },
    puppetResource: async (r) => (await ask("puppet.resource", { type: r.type, name: r.name, properties: r.properties }, r.signal)) as PuppetResourceResult,
    persistStage: async () => ((await ask("provision.persist_stage", {})) as { changed: boolean }).changed,
    // Puppet's state: read here when the daemon may (a node muster provisioned: set_server made it
    // readable, and a file watch can follow it), asked of root when Puppet keeps it root's alone.
    async readPuppetState(t, file) {
      try {
        return readStateText(await puppetStateFile(new PuppetAgent(t.settings), file));
      } catch (e) {
        if (!isPermissionError(e)) throw e;
        return ((await ask("puppet.read_state", { agent: t.agent, file })) as { text: string | null }).text;
      }
    },
    async lastRunReport(t) {
      const path = puppetStatePaths(new PuppetAgent(t.settings)).lastRunReport;
      try {
        accessSync(path, constants.R_OK);
        return readLastRunReport(path) ?? null;
      } catch (e) {
        if (!isPermissionError(e)) return null;
        return (await ask("puppet.last_run_report", { agent: t.agent })) as ReportDetails | null;
      }
    },
    nodeFacts: async () => (await ask("puppet.facts", {})) as Record<string, unknown>,
  };
}
