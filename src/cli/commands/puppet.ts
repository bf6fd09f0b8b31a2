import { hostname } from "node:os";
import { Command, Option } from "commander";
import { puppetDDL } from "../../agents/puppet/ddl.js";
import { MusterError, RpcError } from "../../errors.js";
import type { ProgressEvent, RunallReport } from "../../fleet/runall.js";
import type { RunonceInput } from "../../fleet/runner.js";
import { addFilterOptions, addRpcOptions, openSession, type FilterOpts, type RpcOpts } from "../options.js";

// `muster puppet ...`: the puppet agent across the fleet. runall keeps exactly N runs going;
// the rest are single RPC calls with the puppet agent's aggregates.

const EXIT_HELP = "\nExit codes: 0 all ok, 1 nothing discovered, 2 some failed, 3 no responses, 4 no discovery and no responses, 64 usage.";

const positive = (name: string, integer: boolean) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) throw new MusterError("MUSTER_USAGE", `${name} takes a positive ${integer ? "whole " : ""}number, got ${JSON.stringify(v)}`);
  return n;
};

/** Validate inputs before anything is sent; a bad one is a usage error. */
async function checked(action: keyof typeof puppetDDL.actions, data: Record<string, unknown>): Promise<Record<string, unknown>> {
  const { validateInput } = await import("../../ddl/validate.js"); // when a command runs, not for --help
  try {
    validateInput(puppetDDL, action, data);
  } catch (e) {
    if (e instanceof RpcError) throw new MusterError("MUSTER_USAGE", `puppet ${action}: ${e.message}`);
    throw e;
  }
  return data;
}

interface RunallOpts extends FilterOpts {
  rerun?: number;
  cycles?: number;
  order: "duration" | "name";
  noop?: boolean;
  tags?: string;
  environment?: string;
  startTimeout: number;
  pollInterval: number;
  runTimeout: number;
  progress?: boolean;
}

function runallCommand(): Command {
  return addFilterOptions(new Command("runall"))
    .description("Run Puppet on every matching node, keeping exactly CONCURRENCY runs going: the next starts as soon as one ends")
    .argument("<concurrency>", "how many runs at once", positive("concurrency", true))
    .option("--rerun <seconds>", "loop: start a new round every SECONDS (or at once when a round takes longer) until interrupted", positive("--rerun", false))
    .option("--cycles <n>", "with --rerun: stop after N rounds", positive("--cycles", true))
    .addOption(new Option("--order <order>", "start order: duration = longest last run first (shortest makespan), name = by identity as mc-puppetd").choices(["duration", "name"]).default("duration"))
    .option("--noop", "no-op runs: only report what would change")
    .option("--tags <tags>", "apply only resources with these tags (comma-separated)")
    .option("--environment <env>", "Puppet environment for the runs")
    .option("--start-timeout <seconds>", "a node that does not answer runonce (or the status check) within this is given up", positive("--start-timeout", false), 10)
    .option("--poll-interval <seconds>", "ask a node's status when its run has not been heard of for this long (run_complete events are the rule)", positive("--poll-interval", false), 30)
    .option("--run-timeout <seconds>", "give up on a run not finished after this", positive("--run-timeout", false), 1800)
    .option("--no-progress", "no progress bar")
    .addHelpText(
      "after",
      `
Nodes with Puppet disabled are skipped and listed; a node that does not answer, or stops answering
mid-run, frees its slot after the timeouts above. Runs start without splay. Each run's end is
learnt from the node's run_complete event (muster.event.puppet.run_complete).

Examples:
  muster puppet runall 4
  muster puppet runall 10 -C role::web --noop
  muster puppet runall 5 -F country=de --rerun 3600

Exit codes: 0 every run ok (disabled nodes skipped are fine), 1 nothing discovered,
2 some run failed, was busy, vanished or timed out, 64 usage.`,
    )
    .action(async (concurrency: number, o: RunallOpts) => {
      const [{ randomUUID }, { runAll }, { progressLine, renderRunallSummary, runallExitCode, stamp }, { noReplyHint }] = await Promise.all([
        import("node:crypto"),
        import("../../fleet/runner.js"),
        import("../puppet-render.js"),
        import("../output.js"),
      ]);
      if (o.cycles !== undefined && o.rerun === undefined) throw new MusterError("MUSTER_USAGE", "--cycles goes with --rerun");
      const runonce: RunonceInput = { force: true };
      if (o.noop) runonce.noop = true;
      if (o.tags !== undefined) runonce.tags = o.tags;
      if (o.environment !== undefined) runonce.environment = o.environment;
      await checked("runonce", { ...runonce });
      const s = await openSession(o);
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once("SIGINT", onSignal);
      process.once("SIGTERM", onSignal);
      const tty = !o.json && o.progress !== false && process.stdout.isTTY === true && process.stderr.isTTY === true;
      const out = (line: string) => (o.json ? undefined : process.stdout.write(`${line}\n`));
      let worst = 0;
      try {
        const measured = new Map<string, number>();
        for (let cycle = 1; ; cycle++) {
          const t0 = Date.now();
          out(`${stamp(t0)}> Running all nodes with a concurrency of ${concurrency}${o.rerun ? ` (round ${cycle})` : ""}`);
          out(`${stamp(Date.now())}> Discovering Puppet nodes to manage`);
          const filter = s.filter.agent.includes("puppet") ? s.filter : { ...s.filter, agent: [...s.filter.agent, "puppet"] };
          const nodes = await s.client.discover({ filter, source: s.source, timeoutMs: s.discoveryTimeoutMs });
          out(`${stamp(Date.now())}> Found ${nodes.length} node${nodes.length === 1 ? "" : "s"}`);
          if (nodes.length === 0) {
            if (!o.json) process.stderr.write(`No request sent, we did not discover any nodes.\n${s.source ? "" : `${noReplyHint(s.client.key)}\n`}`);
            else process.stdout.write(`${JSON.stringify(emptyReport(concurrency))}\n`);
            worst = Math.max(worst, 1);
          } else {
            const cliProgress = tty ? (await import("cli-progress")).default : undefined; // only a terminal draws bars
            const bar = cliProgress ? new cliProgress.MultiBar({ stream: process.stderr, format: " * [{bar}] {value} / {total}  running {running}", barCompleteChar: "=", barIncompleteChar: " ", hideCursor: true, clearOnComplete: true }, cliProgress.Presets.legacy) : undefined;
            const b = bar?.create(nodes.length, 0, { running: 0 });
            let going = 0;
            let finished = 0;
            const onProgress = (e: ProgressEvent) => {
              const line = progressLine(e);
              if (line && !o.json) {
                if (bar) bar.log(`${line}\n`);
                else out(line);
              }
              if (e.type === "start") going = e.running + 1;
              else {
                if (e.type === "finish") going = e.running;
                finished = e.done;
              }
              b?.update(finished, { running: going });
            };
            let report: RunallReport;
            let unverified: string[] = [];
            try {
              const r = await runAll(s.client, {
                concurrency,
                nodes,
                runonce,
                expectedMs: measured,
                order: o.order,
                startTimeoutMs: o.startTimeout * 1000,
                pollIntervalMs: o.pollInterval * 1000,
                runTimeoutMs: o.runTimeout * 1000,
                onProgress,
                signal: stop.signal,
                // progress as runall events: the web console shows runs started here too
                announce: { id: randomUUID(), identity: (await import("../../protocol/subjects.js")).isValidIdentity(hostname()) ? hostname() : "muster-cli", startedBy: s.client.key.name, filter: process.argv.slice(3).join(" ") },
              });
              report = r.report;
              unverified = r.unverified;
              for (const [k, v] of r.measuredMs) measured.set(k, v);
            } finally {
              bar?.stop();
            }
            if (o.json) process.stdout.write(`${JSON.stringify({ round: cycle, ...report, unverified }, null, o.rerun ? undefined : 2)}\n`);
            else out(`\n${renderRunallSummary(report, unverified)}\n`);
            worst = Math.max(worst, runallExitCode(report));
          }
          if (!o.rerun || stop.signal.aborted || (o.cycles !== undefined && cycle >= o.cycles)) break;
          const wait = Math.max(0, o.rerun * 1000 - (Date.now() - t0));
          if (wait > 0) {
            out(`${stamp(Date.now())}> Next round in ${(wait / 1000).toFixed(1)} s`);
            await new Promise<void>((resolve) => {
              const t = setTimeout(resolve, wait); // --rerun: the requested pause between rounds
              stop.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
            });
            if (stop.signal.aborted) break;
          }
        }
      } finally {
        process.removeListener("SIGINT", onSignal);
        process.removeListener("SIGTERM", onSignal);
        await s.client.close();
      }
      process.exitCode = worst;
    });
}

function emptyReport(concurrency: number): RunallReport {
  return { nodes: [], order: [], counts: { ok: 0, changed: 0, failed: 0, skipped: 0, busy: 0, vanished: 0, timeout: 0, cancelled: 0 }, makespanMs: 0, maxConcurrency: 0, concurrency };
}

interface RunonceOpts extends RpcOpts {
  force?: boolean;
  noop?: boolean;
  tags?: string;
  environment?: string;
  splay?: boolean;
  splaylimit?: number;
  server?: string;
}

function runonceCommand(): Command {
  return addRpcOptions(new Command("runonce"))
    .description("Start one Puppet run on every matching node (all at once; use runall to cap concurrency)")
    .option("--force", "start at once, without splay")
    .option("--noop", "no-op run: only report what would change")
    .option("--tags <tags>", "apply only resources with these tags (comma-separated)")
    .option("--environment <env>", "Puppet environment for the run")
    .option("--splay", "wait a random time up to the splay limit first")
    .option("--no-splay", "no splay, whatever the node's default")
    .option("--splaylimit <seconds>", "upper bound of the splay", positive("--splaylimit", true))
    .option("--server <host[:port]>", "master for this run (nodes refuse unless their config allows it)")
    .addHelpText("after", `\nThe reply says the run started; its end is published as muster.event.puppet.run_complete.\n\nExamples:\n  muster puppet runonce -I web1 --noop\n  muster puppet runonce -C role::db --splay --splaylimit 120\n${EXIT_HELP}`)
    .action(async (o: RunonceOpts) => {
      const data: Record<string, unknown> = {};
      if (o.force) data.force = true;
      if (o.noop) data.noop = true;
      if (o.tags !== undefined) data.tags = o.tags;
      if (o.environment !== undefined) data.environment = o.environment;
      if (o.splay !== undefined) data.splay = o.splay;
      if (o.splaylimit !== undefined) data.splaylimit = o.splaylimit;
      if (o.server !== undefined) data.server = o.server;
      await (await import("../run-rpc.js")).executeRpc(o, "puppet", "runonce", await checked("runonce", data), puppetDDL);
    });
}

function simpleCommand(name: string, action: "status" | "enable" | "last_run_summary", description: string, extra: { render?: "renderStatus" | "renderSummaryStats" | "renderCount"; aggregates?: boolean; examples: string }): Command {
  return addRpcOptions(new Command(name))
    .description(description)
    .addHelpText("after", `\nExamples:\n${extra.examples}\n${EXIT_HELP}`)
    .action(async (o: RpcOpts) => {
      const [{ executeRpc }, renderers] = await Promise.all([import("../run-rpc.js"), import("../puppet-render.js")]);
      const render = extra.render && !o.display ? renderers[extra.render] : undefined;
      await executeRpc(o, "puppet", action, {}, puppetDDL, render, { aggregates: extra.aggregates ?? true });
    });
}

function disableCommand(): Command {
  return addRpcOptions(new Command("disable"))
    .description("Stop Puppet runs on the matching nodes (puppet agent --disable); nodes already disabled keep their message")
    .argument("[message...]", "why (default: who disabled it and when)")
    .addHelpText("after", `\nExamples:\n  muster puppet disable -C role::db "database upgrade, ask jane"\n  muster puppet disable -I web1\n${EXIT_HELP}`)
    .action(async (words: string[], o: RpcOpts) => {
      const message = words.join(" ").trim();
      await (await import("../run-rpc.js")).executeRpc(o, "puppet", "disable", await checked("disable", message ? { message } : {}), puppetDDL);
    });
}

export function puppetCommand(): Command {
  const cmd = new Command("puppet")
    .description("Puppet across the fleet: runall with capped concurrency, runonce, status, summary, count, enable, disable")
    .addHelpText("after", "\nExamples:\n  muster puppet runall 4\n  muster puppet status -F country=de\n  muster puppet count\n  muster puppet disable -C role::db \"schema change\"\n  muster find -S \"puppet().enabled=false\"");
  const subs = [
    runallCommand(),
    runonceCommand(),
    simpleCommand("status", "status", "Each node's Puppet state: applying, idling, stopped or disabled, and the age of its last run", {
      render: "renderStatus",
      examples: "  muster puppet status\n  muster puppet status -S \"puppet().since_lastrun>3600\"",
    }),
    simpleCommand("summary", "last_run_summary", "Last run figures over the matching nodes: resources, failures, times (min / average / max)", {
      render: "renderSummaryStats",
      aggregates: false,
      examples: "  muster puppet summary\n  muster puppet summary -C role::web --display all   (every node's figures)",
    }),
    simpleCommand("count", "status", "How many nodes are enabled, disabled, applying, idling", {
      render: "renderCount",
      aggregates: false,
      examples: "  muster puppet count\n  muster puppet count -F country=de",
    }),
    simpleCommand("enable", "enable", "Allow Puppet runs again on the matching nodes (puppet agent --enable)", { examples: "  muster puppet enable -C role::db" }),
    disableCommand(),
  ];
  for (const s of subs) cmd.addCommand(s.exitOverride());
  return cmd;
}
