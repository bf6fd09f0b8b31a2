import { Command } from "commander";
import type { RpcResult } from "../../client/client.js";
import { MusterError, RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { addRpcOptions, type RpcOpts } from "../options.js";
import { bold, formatValue, green, red, unverifiedMark } from "../style.js";

// `muster resource TYPE NAME [key=value ...] [filters]`: `puppet resource` on every matching node.
// With properties it applies them (resource#apply); without, it shows the state (resource#show).

export function renderResourceResult(result: RpcResult, display: "ok" | "failed" | "all"): string {
  const replies = [...result.replies].sort((a, b) => a.sender.localeCompare(b.sender));
  const mark = unverifiedMark(result.unverified);
  const lines: string[] = [];
  let changed = 0;
  let unchanged = 0;
  let failed = 0;
  for (const r of replies) {
    const ok = r.statuscode === Status.OK;
    const d = r.data;
    if (!ok) failed++;
    else if (d.changed === true) changed++;
    else unchanged++;
    if (display === "ok" ? !ok : display === "failed" ? ok : false) continue;
    const head = !ok ? red(r.statusmsg || "failed") : result.action === "show" ? (d.managed === true ? "managed by Puppet" : "") : d.changed === true ? green("changed") : "unchanged";
    lines.push(head ? `${bold(r.sender)}: ${head}${mark(r.sender)}` : `${bold(r.sender)}${mark(r.sender)}`);
    const state = d.state && typeof d.state === "object" ? (d.state as Record<string, unknown>) : {};
    const keys = Object.keys(state);
    const w = Math.max(0, ...keys.map((k) => k.length));
    for (const k of keys) lines.push(`   ${k.padStart(w)} => ${formatValue(state[k])}`);
    for (const c of asStrings(d.changes)) lines.push(`   change: ${c}`);
    for (const e of asStrings(d.errors)) lines.push(`   ${red("error")}: ${e}`);
    for (const e of asStrings(d.warnings)) lines.push(`   warning: ${e}`);
    lines.push("");
  }
  const noResponse = result.stats.noResponse.length;
  const summary = result.action === "show" ? `Summary: ${replies.length - failed} shown, ${failed} failed` : `Summary: ${changed} changed, ${unchanged} unchanged, ${failed} failed`;
  lines.push(noResponse ? `${summary}, ${noResponse} did not respond` : summary);
  return lines.join("\n");
}

function asStrings(v: unknown): string[] {
  return Array.isArray(v) ? v.map((x) => String(x)) : [];
}

export function resourceCommand(): Command {
  return addRpcOptions(new Command("resource"))
    .description("Apply a Puppet resource with the real `puppet resource` on every matching node (no properties: show its state)")
    .argument("<type>", "resource type (file, package, service, ...); the node must allow it (plugins.resource.allowed_types)")
    .argument("<name>", "resource title, e.g. a path or a package name")
    .argument("[properties...]", "properties to set as key=value")
    .addHelpText(
      "after",
      "\nExamples:\n  muster resource package htop ensure=installed -C base\n  muster resource service nginx ensure=running -F role=web\n  muster resource file /etc/motd -I web1      (show)\n\nResources the node's Puppet catalog manages are refused unless the node sets allow_managed.\nExit codes: 0 all ok, 1 nothing discovered, 2 some failed, 3 no responses, 4 no discovery and no responses.",
    )
    .action(async (type: string, name: string, words: string[], o: RpcOpts) => {
      const action = words.length ? "apply" : "show";
      // Loaded when the command runs, not for its --help (npm run bench:cli).
      const [{ resourceDDL }, { parsePropertyArgs }, { validateInput }] = await Promise.all([import("../../agents/resource/ddl.js"), import("../../agents/resource/validate.js"), import("../../ddl/validate.js")]);
      let data: Record<string, unknown>;
      // Words that are not key=value pairs are a malformed command line (usage, 64); values the
      // DDL refuses are invalid input (1), as for `muster rpc`. Nothing is sent either way.
      try {
        data = words.length ? { type, name, properties: parsePropertyArgs(words) } : { type, name };
      } catch (e) {
        if (e instanceof RpcError) throw new MusterError("MUSTER_USAGE", `${e.message}\nusage: muster resource TYPE NAME [key=value ...] [filters]`);
        throw e;
      }
      try {
        data = validateInput(resourceDDL, action, data);
      } catch (e) {
        if (e instanceof RpcError) throw new MusterError("MUSTER_INPUT_INVALID", e.message);
        throw e;
      }
      const { executeRpc } = await import("../run-rpc.js");
      await executeRpc(o, "resource", action, data, resourceDDL, (r) => renderResourceResult(r, o.display ?? "all"), { aggregates: false });
    });
}
