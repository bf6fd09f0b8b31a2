import { Command, CommanderError } from "commander";
import type { RpcResult } from "../../client/client.js";
import { FilterError } from "../../filter/error.js";
import { ownsUsageErrors } from "../exit.js";
import { addRpcOptions, openSession, type RpcOpts } from "../options.js";
import { UNVERIFIED } from "../style.js";

// `muster nrpe COMMAND [args...] [filters]`: an NRPE check across the fleet as one Nagios check.
// The first line is the Nagios summary with perfdata, the following lines list the hosts that are
// not OK; the exit code is the Nagios state. Nodes that do not answer count as UNKNOWN. Anything
// that stops the check itself (bad arguments or filters, no broker) is UNKNOWN (3) too, never
// WARNING: a broken check must not look like a mild problem to the monitoring system.

const LABELS = ["OK", "WARNING", "CRITICAL", "UNKNOWN"] as const;
/** How long to wait for replies unless --timeout says otherwise: the node's default check timeout plus margin. */
const DEFAULT_WAIT_SECONDS = 20;

export interface NrpeHostResult {
  identity: string;
  exitcode: 0 | 1 | 2 | 3;
  output: string;
  perfdata: string;
  /** false when the reply came from a sender the node-key directory does not know (absent for no response). */
  verified?: boolean;
}

export interface NrpeSummary {
  command: string;
  exitcode: number;
  counts: { ok: number; warning: number; critical: number; unknown: number; total: number };
  checktime: number;
  hosts: NrpeHostResult[];
}

const asState = (v: unknown): 0 | 1 | 2 | 3 => (v === 0 || v === 1 || v === 2 || v === 3 ? v : 3);

export function summariseNrpe(command: string, result: RpcResult): NrpeSummary {
  const unverified = new Set(result.unverified);
  const hosts: NrpeHostResult[] = result.replies.map((r) => ({
    identity: r.sender,
    verified: !unverified.has(r.sender),
    exitcode: asState(r.data.exitcode),
    output: typeof r.data.output === "string" && r.data.output !== "" ? r.data.output : r.statusmsg || "no output",
    perfdata: typeof r.data.perfdata === "string" ? r.data.perfdata : "",
  }));
  for (const n of result.stats.noResponse) hosts.push({ identity: n, exitcode: 3, output: "no response", perfdata: "" });
  hosts.sort((a, b) => a.identity.localeCompare(b.identity));
  const count = (s: number) => hosts.filter((h) => h.exitcode === s).length;
  const counts = { ok: count(0), warning: count(1), critical: count(2), unknown: count(3), total: hosts.length };
  // As check-mc-nrpe: any CRITICAL wins (UNKNOWN is 3, but must not hide a critical), else the highest.
  const exitcode = hosts.length === 0 ? 3 : counts.critical > 0 ? 2 : Math.max(...hosts.map((h) => h.exitcode));
  return { command, exitcode, counts, checktime: result.stats.totalMs / 1000, hosts };
}

export function renderNrpe(s: NrpeSummary): string {
  const c = s.counts;
  const perf = `total=${c.total} ok=${c.ok} warn=${c.warning} crit=${c.critical} unknown=${c.unknown} checktime=${s.checktime.toFixed(6)}`;
  if (c.total === 0) return `${s.command}: UNKNOWN: did not discover any nodes|${perf}`;
  const lines = [`${s.command}: OK: ${c.ok} WARNING: ${c.warning} CRITICAL: ${c.critical} UNKNOWN: ${c.unknown}|${perf}`];
  for (const state of [2, 1, 3] as const) {
    const hosts = s.hosts.filter((h) => h.exitcode === state);
    if (hosts.length === 0) continue;
    lines.push(`${LABELS[state]}:`);
    for (const h of hosts) lines.push(`   ${h.identity}${h.verified === false ? ` ${UNVERIFIED}` : ""}: ${h.output.split("\n")[0]}`);
  }
  return lines.join("\n");
}

function unknownLine(command: string, e: unknown): string {
  const msg = e instanceof FilterError ? e.render() : e instanceof Error ? e.message : String(e);
  return `${command}: UNKNOWN: ${msg.replace(/\s*\n\s*/g, " ")}`;
}

/**
 * A usage error of `muster nrpe` itself (unknown option, missing command, bad option value) as
 * Nagios wants it: `COMMAND: UNKNOWN: why` (`NRPE: UNKNOWN: why` before a command is known), exit 3.
 * Plugin-style arguments are not passed through: commander would also hand the plugin any muster
 * option that follows the first unknown one, so the hint points at `--` instead.
 */
export function nrpeUsageLine(command: string | undefined, e: CommanderError): string {
  let why = e.message.replace(/^error: /, "").replace(/\s*\n\s*/g, " ");
  if (e.code === "commander.unknownOption") why += `; plugin arguments that start with '-' go after -- (muster nrpe ${command ?? "COMMAND"} [filters] -- -w 20% -c 10%)`;
  else if (e.code === "commander.missingArgument") why += " (muster nrpe COMMAND [args...] [filters]; see muster nrpe --help)";
  return `${command ?? "NRPE"}: UNKNOWN: ${why}`;
}

/** The check's name from the raw command line (commander may fail before it has parsed operands). */
function commandWord(cmd: Command): string | undefined {
  const words = process.argv.slice(process.argv.indexOf("nrpe") + 1);
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (w === "--") return undefined;
    if (!w.startsWith("-")) return w;
    const opt = cmd.options.find((o) => o.short === w || o.long === w);
    if (opt && (opt.required || opt.optional)) i++; // skip the option's value
  }
  return undefined;
}

export function nrpeCommand(): Command {
  const cmd = new Command("nrpe");
  ownsUsageErrors.add(cmd);
  return addRpcOptions(cmd)
    .configureOutput({ outputError: () => undefined }) // nrpeUsageLine says it on stdout, where Nagios reads
    .exitOverride((e) => {
      if (e.exitCode === 0) throw e; // --help
      process.stdout.write(`${nrpeUsageLine(commandWord(cmd), e)}\n`);
      process.exit(3);
    })
    .description("Run an NRPE check on every matching node and print one Nagios result: summary line with perfdata, then the hosts not OK")
    .argument("<command>", "NRPE command name (command[NAME]=... in the nodes' nrpe.d/*.cfg)")
    .argument("[args...]", "arguments for $ARG1$, $ARG2$, ... (put them after -- when one starts with '-')")
    .addHelpText(
      "after",
      `\nExamples:\n  muster nrpe check_load -C web\n  muster nrpe check_disk -F role=db -- -w 20% -c 10%\n\nExit codes are Nagios states: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. Any CRITICAL host makes the check\nCRITICAL; otherwise the worst state wins. Non-responding nodes count as UNKNOWN; nothing discovered is UNKNOWN.\nWaits ${DEFAULT_WAIT_SECONDS} s for replies unless --timeout is given.`,
    )
    .action(async (command: string, args: string[], o: RpcOpts) => {
      let summary: NrpeSummary;
      try {
        const [{ validateInput }, { nrpeDDL }] = await Promise.all([import("../../ddl/validate.js"), import("../../agents/nrpe/ddl.js")]);
        const data = validateInput(nrpeDDL, "runcommand", args.length ? { command, args: args.join("!") } : { command });
        const { limitFromOpts } = await import("../session.js");
        const limit = limitFromOpts(o);
        const s = await openSession(o);
        try {
          const result = await s.client.call("nrpe", "runcommand", data, {
            filter: s.filter,
            discovery: { source: s.source, timeoutMs: s.discoveryTimeoutMs, filter: s.filter },
            ddl: nrpeDDL,
            batch: o.batch,
            batchSleepMs: o.batchSleep ? o.batchSleep * 1000 : undefined,
            limit,
            timeoutMs: (o.timeout ?? DEFAULT_WAIT_SECONDS) * 1000,
          });
          summary = summariseNrpe(command, result);
        } finally {
          await s.client.close();
        }
      } catch (e) {
        if (o.json) process.stdout.write(`${JSON.stringify({ command, exitcode: 3, error: e instanceof Error ? e.message : String(e) })}\n`);
        else process.stdout.write(`${unknownLine(command, e)}\n`);
        process.exitCode = 3;
        return;
      }
      process.stdout.write(o.json ? `${JSON.stringify(summary, null, 2)}\n` : `${renderNrpe(summary)}\n`);
      process.exitCode = summary.exitcode;
    });
}
