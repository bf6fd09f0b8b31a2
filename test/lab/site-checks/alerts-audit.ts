import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:https";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { labWebToken } from "../../../src/lab/credentials.js";
import type { Site } from "../../../src/lab/site/index.js";
import { eventually, runCli } from "../../support/collective.js";
import { memberStreams } from "./health.js";

// The site's alerts and audit (issue 36 §3 and §4), as checks the site e2e runs on its started
// Site. Each says when in the site's life it belongs; none leaves the site changed (a powered-off
// machine is powered on again and waited for).
//
//   siteAuditHolds             any time the console is up: a CLI action, a console action and a
//                              refusal are in the replicated audit stream, and the console shows them.

/** The admins' webhook (the lab's receiver, where console.lab's notifier posts): every notification so far. */
export function notifications(site: Site): { subject: string; message: string }[] {
  return readFileSync(site.state.receiver.file, "utf8")
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { subject: string; message: string });
}

/** A client config naming the site's brokers with the operator's credential; the env for `muster` children. */
export function operatorEnv(site: Site, dir: string): NodeJS.ProcessEnv {
  const cfg = join(dir, "alerts-audit-client.yaml");
  writeFileSync(cfg, toYaml({ brokers: site.state.site!.brokers, collective: site.state.collective, tls: site.state.tls.admin }));
  return { ...process.env, MUSTER_CONFIG: cfg, MUSTER_BROKER: "" };
}

/** The console on console.lab, over its HTTPS (the site CA), as an operator or a viewer with the lab's tokens. */
export function siteConsole(site: Site) {
  const web = site.state.web!;
  const agent = new Agent({ ca: readFileSync(site.state.tls.ca) });
  const token = (role: "operator" | "viewer") => labWebToken(web.tokens_file, role)!;
  const call = (role: "operator" | "viewer", method: "GET" | "POST", path: string, body?: unknown, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: unknown }>((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = request(new URL(path, web.url), { method, agent, timeout: 30_000, headers: { authorization: `Bearer ${token(role)}`, ...(data ? { "content-type": "application/json" } : {}), ...headers } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as unknown) : null }));
      });
      req.once("error", reject);
      req.once("timeout", () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
      req.end(data);
    });
  return {
    get: (role: "operator" | "viewer", path: string) => call(role, "GET", path),
    /** A POST with the session's CSRF token, as the console's pages send it. */
    async post(role: "operator" | "viewer", path: string, body: unknown) {
      const s = (await call(role, "GET", "/api/session")).body as { csrf: string };
      return call(role, "POST", path, body, { "x-csrf-token": s.csrf });
    },
  };
}

/**
 * The site's audit: a CLI action (`muster alerts test`: the CLI's record and the notifier's record of
 * the request), a console action (an operator silencing a node, and ending it) and refusals (a
 * viewer's POST, a viewer's look at the audit) are all in MUSTER_AUDIT, which has three copies, and
 * the console's audit page shows each. `dir`: where to write the CLI's client config.
 */
export async function siteAuditHolds(site: Site, dir: string): Promise<void> {
  const env = operatorEnv(site, dir);
  const t = await runCli(["alerts", "test", "--note", "site audit check"], { env, timeoutMs: 120_000 });
  assert.equal(t.code, 0, `muster alerts test: ${t.stderr || t.stdout}`);
  const web = siteConsole(site);
  const target = "audit-check.lab";
  const sil = await web.post("operator", "/api/alerts/silence", { identity: target, for: "5m", note: "site audit check" });
  assert.equal(sil.status, 200, JSON.stringify(sil.body));
  assert.equal((await web.post("operator", "/api/alerts/unsilence", { identity: target })).status, 200);
  const refusedPost = await web.post("viewer", "/api/alerts/test", {});
  assert.equal(refusedPost.status, 403);
  assert.equal((await web.get("viewer", "/api/audit")).status, 403);

  type Row = { user: string; action: string; target: string; ok: boolean; source: string };
  const want: [string, (r: Row) => boolean][] = [
    ["the CLI's record of muster alerts test", (r) => r.source === "cli" && r.action === "alerts.test" && r.ok],
    ["the notifier's record of the CLI's request", (r) => r.source === "node" && r.action === "notify.send" && r.target === "console.lab" && r.ok && !r.user.startsWith("web:") && r.user !== "console"],
    ["the console's silence", (r) => r.source === "console" && r.action === "alerts.silence" && r.target === target && r.ok],
    ["the viewer's refused test alert", (r) => r.source === "console" && r.action === "alerts.test" && !r.ok && /forbidden/.test(JSON.stringify(r))],
    ["the viewer's refused look at the audit", (r) => r.source === "console" && r.action === "read_audit" && !r.ok],
  ];
  let last: Row[] = [];
  await eventually(
    async () => {
      const page = await web.get("operator", "/api/audit?limit=5000");
      last = (page.body as { rows: Row[] }).rows;
      return want.every(([, ok]) => last.some(ok)) ? true : undefined;
    },
    60_000,
    "the CLI's action, the console's and the refusals on the console's audit page",
  ).catch((e: Error) => {
    throw new Error(`${e.message}; missing: ${want.filter(([, ok]) => !last.some(ok)).map(([w]) => w).join(", ")}; newest rows: ${JSON.stringify(last.slice(0, 15))}`);
  });
  // replicated: each broker holds a copy of the audit and of the alerts' history
  const replicas = Object.fromEntries((await memberStreams(site, 1, 10_000)).map((s) => [s.name, s.config?.num_replicas]));
  assert.deepEqual([replicas.MUSTER_AUDIT, replicas.MUSTER_ALERTS], [3, 3], JSON.stringify(replicas));
}
