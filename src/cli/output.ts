import { createRequire } from "node:module";
// ddl/aggregate.js, not ddl/index.js: the index loads zod (DDL files), which printing needs not.
import { aggregateReplies, formatAggregate, type AggregateResult } from "../ddl/aggregate.js";
import type { AgentDDL } from "../ddl/types.js";
import type { RpcResult } from "../client/client.js";
import { Status, statusName } from "../protocol/status.js";
import type { Reply } from "../protocol/types.js";
import type { SigningKey } from "../protocol/signing.js";
import { signingKeyFile } from "../security/keys.js";

// Terminal and JSON rendering of RPC results, in the shape mco users know.

import { bold, formatValue, green, red, UNVERIFIED, yellow } from "./style.js";

export { bold, formatValue, green, red, UNVERIFIED, yellow };

/** A progress bar on stderr when it is a terminal; a no-op otherwise. */
export function progressBar(enabled: boolean): { start(total: number): void; tick(): void; stop(): void } {
  if (!enabled || !process.stderr.isTTY) return { start() {}, tick() {}, stop() {} };
  // Loaded only when a bar is drawn (a terminal): not for --help, pipes or scripts.
  const cliProgress = createRequire(import.meta.url)("cli-progress") as typeof import("cli-progress");
  const bar = new cliProgress.SingleBar({ stream: process.stderr, format: " * [{bar}] {value} / {total}", barCompleteChar: "=", barIncompleteChar: " ", hideCursor: true, clearOnComplete: true }, cliProgress.Presets.legacy);
  let started = false;
  return {
    start(total) {
      bar.start(total, 0);
      started = true;
    },
    tick() {
      if (started) bar.increment();
    },
    stop() {
      if (started) bar.stop();
    },
  };
}

function shouldShow(r: Reply, display: "ok" | "failed" | "all"): boolean {
  if (display === "all") return true;
  return display === "ok" ? r.statuscode === Status.OK : r.statuscode !== Status.OK;
}

export function defaultDisplay(ddl: AgentDDL | undefined, action: string): "ok" | "failed" | "all" {
  const d = ddl?.actions[action]?.display;
  return d === "failed" ? "failed" : d === "ok" ? "ok" : "all";
}

export function renderReplies(result: RpcResult, ddl: AgentDDL | undefined, display: "ok" | "failed" | "all"): string {
  const outSpec = ddl?.actions[result.action]?.output ?? {};
  const lines: string[] = [];
  const replies = [...result.replies].sort((a, b) => a.sender.localeCompare(b.sender));
  const width = Math.min(40, Math.max(10, ...replies.map((r) => r.sender.length)));
  const unverified = new Set(result.unverified);
  for (const r of replies) {
    if (!shouldShow(r, display)) continue;
    const mark = unverified.has(r.sender) ? ` ${UNVERIFIED}` : "";
    if (r.statuscode !== Status.OK) {
      lines.push(`${r.sender.padEnd(width)}: ${red(r.statusmsg || statusName[r.statuscode as 0] || `status ${r.statuscode}`)}${mark}`);
      if (Object.keys(r.data).length === 0) continue;
    } else lines.push(`${r.sender}${mark}`);
    const keys = Object.keys(r.data);
    const labelWidth = Math.max(0, ...keys.map((k) => (outSpec[k]?.display_as ?? k).length));
    for (const k of keys) lines.push(`   ${(outSpec[k]?.display_as ?? k).padStart(labelWidth)}: ${formatValue(r.data[k])}`);
    lines.push("");
  }
  return lines.join("\n");
}

export function aggregatesFor(result: RpcResult, ddl: AgentDDL | undefined): AggregateResult[] {
  if (!ddl) return [];
  // As MCollective: OK and Aborted replies are aggregated. An aborted reply still carries its
  // outputs (a disabled node's runonce says started: false), so the tally counts it.
  return aggregateReplies(ddl, result.action, result.replies.filter((r) => r.statuscode === Status.OK || r.statuscode === Status.Aborted).map((r) => r.data));
}

export function renderAggregates(aggs: AggregateResult[]): string {
  return aggs.map((a) => formatAggregate(a).join("\n")).join("\n\n");
}

export function renderSummary(result: RpcResult): string {
  const s = result.stats;
  const ms = (n: number) => `${n.toFixed(2)}ms`;
  const lines = [
    bold("---- rpc stats ----"),
    `           Nodes: ${s.responded} / ${s.discovered}`,
    `     Pass / Fail: ${s.ok} / ${s.failed}`,
    `  Discovery Time: ${ms(s.discoveryMs)}`,
    `      Agent Time: ${ms(s.callMs)}`,
    `      Total Time: ${ms(s.totalMs)}`,
  ];
  const trust = trustLine(result);
  if (trust) lines.push(trust);
  if (s.noResponse.length) lines.push("", red(`No response from:`), ...s.noResponse.map((n) => `   ${n}`));
  return lines.join("\n");
}


/** The summary's line on unproven and dropped replies (docs/security.md, "Verifying replies"); empty when all were proven. */
export function trustLine(result: RpcResult): string {
  const s = result.stats;
  const parts: string[] = [];
  if (s.unverified) parts.push(`${s.unverified} of ${s.responded} replies ${UNVERIFIED}: no known key for their sender`);
  if (s.rejected) parts.push(red(`${s.rejected} dropped: bad signature or wrong key`));
  return parts.length ? `      Unverified: ${parts.join("; ")}` : "";
}

/** One stderr line per reply dropped by verification. */
export function rejectedLines(result: RpcResult): string {
  return result.rejected.map((r) => `muster: dropped a reply claiming to be from ${r.sender}: ${r.reason}\n`).join("");
}

export function resultJson(result: RpcResult, aggs: AggregateResult[]): unknown {
  const unverified = new Set(result.unverified);
  return {
    agent: result.agent,
    action: result.action,
    replies: result.replies.map((r) => ({ sender: r.sender, statuscode: r.statuscode, statusmsg: r.statusmsg, data: r.data, verified: !unverified.has(r.sender) })),
    rejected: result.rejected,
    aggregates: aggs,
    stats: result.stats,
  };
}

/**
 * Said on stderr when a broadcast gets no reply at all. Nodes drop broadcasts signed by a key they
 * do not trust without a word (docs/security.md), so an untrusted key looks like an empty fleet.
 */
export function noReplyHint(key: SigningKey): string {
  return (
    `Nodes ignore requests signed by a key they do not trust, so one possible cause is that no node trusts this one: ` +
    `caller ${key.name}, public key ${key.publicKey} (${signingKeyFile(key.name).replace(/\.pem$/, ".pub")}). ` +
    "Run `muster doctor` to check the broker, TLS, the key and whether nodes trust it; a node trusts the .pub files in its security.trusted_keys_dir."
  );
}
