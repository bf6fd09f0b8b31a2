import { spawn } from "node:child_process";
import { constants } from "node:os";
import { createInterface } from "node:readline/promises";
import { Command } from "commander";
import { MusterError } from "../../errors.js";
import { addFilterOptions, openSession, type FilterOpts } from "../options.js";

// `muster ssh [filters] [-- ssh args]`: find a node by what it is and log in to it.
// One match: exec ssh to it. Several: a numbered menu on a terminal, otherwise the list and exit 1.
// None: a message and exit 1. The address is the node's identity, or the value of a fact (--fact,
// or ssh_fact in the client config) read with rpcutil#get_fact. ssh's exit code becomes ours.

interface SshOpts extends FilterOpts {
  fact?: string;
  sshCommand?: string;
}

/** What ssh may be given as the destination: a host name or address (user@ allowed), never an option. */
const ADDRESS = /^(?!-)[A-Za-z0-9_.:%@[\]-]{1,255}$/;

export function sshArgv(sshCommand: string, address: string, extra: readonly string[]): string[] {
  const cmd = sshCommand.trim().split(/\s+/).filter((w) => w !== "");
  if (cmd.length === 0) throw new MusterError("MUSTER_USAGE", "--ssh-command is empty");
  if (!ADDRESS.test(address)) throw new MusterError("MUSTER_INPUT_INVALID", `refusing to ssh to ${JSON.stringify(address)}: not a host name or address`);
  // The destination first: ssh reads options after it too, and `-- cmd` style arguments stay a remote command.
  return [...cmd, address, ...extra];
}

async function chooseNode(nodes: string[]): Promise<string | undefined> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  const width = String(nodes.length).length;
  process.stderr.write(`${nodes.length} nodes match:\n${nodes.map((n, i) => `  ${String(i + 1).padStart(width)}) ${n}`).join("\n")}\n`);
  let closed = false;
  rl.once("close", () => (closed = true));
  try {
    while (!closed) {
      let answer: string;
      try {
        answer = (await rl.question(`Connect to which node? [1-${nodes.length}, q to quit] `)).trim();
      } catch {
        return undefined; // stdin closed
      }
      if (/^q(uit)?$/i.test(answer)) return undefined;
      const n = Number(answer);
      if (Number.isInteger(n) && n >= 1 && n <= nodes.length) return nodes[n - 1];
      const byName = nodes.find((x) => x === answer);
      if (byName) return byName;
      process.stderr.write(`Please answer a number from 1 to ${nodes.length}.\n`);
    }
    return undefined;
  } finally {
    rl.close();
  }
}

function runSsh(argv: string[]): Promise<number> {
  const [bin, ...args] = argv as [string, ...string[]];
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: "inherit" });
    // The terminal sends ctrl-c to ssh too; ssh decides what it means.
    const ignore = () => undefined;
    process.on("SIGINT", ignore);
    child.once("error", (e: NodeJS.ErrnoException) => {
      process.off("SIGINT", ignore);
      reject(new MusterError("MUSTER_INPUT_INVALID", e.code === "ENOENT" ? `${bin} not found: install an ssh client or pass --ssh-command` : `cannot run ${bin}: ${e.message}`));
    });
    child.once("close", (code, signal) => {
      process.off("SIGINT", ignore);
      resolve(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0));
    });
  });
}

export function sshCommand(): Command {
  return addFilterOptions(new Command("ssh"))
    .description("SSH to the node matching the filters (a menu when several match)")
    .argument("[ssh-args...]", "arguments for ssh after the destination (put them after --)")
    .option("--fact <fact>", "fact holding the address to connect to (default: ssh_fact from the client config, else the identity)")
    .option("--ssh-command <command>", "ssh program and options, split on spaces, no shell (default: ssh_command from the client config, else ssh)")
    .addHelpText("after", "\nExamples:\n  muster ssh -I web1\n  muster ssh -F role=db --fact networking.ip -- -l admin\n  muster ssh -C nginx -- uptime\n\nExit code: ssh's own; 1 when no node matches, or several match without a terminal to choose on.")
    .action(async (sshArgs: string[], o: SshOpts) => {
      const s = await openSession(o);
      let target: string | undefined;
      let address: string | undefined;
      try {
        const cfg = s.config as Record<string, unknown>;
        const fact = o.fact ?? (typeof cfg.ssh_fact === "string" ? cfg.ssh_fact : undefined);
        const nodes = await s.client.discover({ filter: s.filter, source: s.source, timeoutMs: s.discoveryTimeoutMs });
        if (nodes.length === 0) {
          process.stderr.write("muster ssh: no node matches the filters; nothing to connect to (try `muster find` with the same filters)\n");
          process.exitCode = 1;
          return;
        }
        if (nodes.length === 1) target = nodes[0]!;
        else if (process.stdin.isTTY && process.stderr.isTTY) {
          target = await chooseNode(nodes);
          if (!target) {
            process.stderr.write("muster ssh: no node chosen\n");
            process.exitCode = 1;
            return;
          }
        } else {
          process.stdout.write(nodes.map((n) => `${n}\n`).join(""));
          process.stderr.write(`muster ssh: ${nodes.length} nodes match and there is no terminal to choose on; narrow the filters (e.g. -I ${nodes[0]})\n`);
          process.exitCode = 1;
          return;
        }
        address = target;
        if (fact) {
          const [{ rpcutilDDL }, { Status }] = await Promise.all([import("../../agents/rpcutil/ddl.js"), import("../../protocol/status.js")]);
          const r = await s.client.call("rpcutil", "get_fact", { fact }, { nodes: [target], ddl: rpcutilDDL, timeoutMs: Math.max(5000, s.discoveryTimeoutMs) });
          const reply = r.replies[0];
          if (!reply) throw new MusterError("MUSTER_TIMEOUT", `${target} did not answer rpcutil#get_fact for ${fact}`);
          const v = reply.data.value;
          if (reply.statuscode !== Status.OK || v === null || v === undefined || v === "") throw new MusterError("MUSTER_INPUT_INVALID", `${target} has no fact ${fact}${reply.statusmsg && reply.statuscode !== Status.OK ? ` (${reply.statusmsg})` : ""}; pick another --fact`);
          if (typeof v !== "string" && typeof v !== "number") throw new MusterError("MUSTER_INPUT_INVALID", `fact ${fact} on ${target} is not a host name or address: ${JSON.stringify(v).slice(0, 100)}`);
          address = String(v);
        }
      } finally {
        await s.client.close();
      }
      if (target === undefined || address === undefined) return;
      const cfg = s.config as Record<string, unknown>;
      const command = o.sshCommand ?? (typeof cfg.ssh_command === "string" ? cfg.ssh_command : "ssh");
      const argv = sshArgv(command, address, sshArgs);
      if (address !== target) process.stderr.write(`Connecting to ${target} at ${address}\n`);
      process.exitCode = await runSsh(argv);
    });
}
