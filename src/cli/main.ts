#!/usr/bin/env node
import { Command, CommanderError } from "commander";
import { MusterError } from "../errors.js";
import { FilterError } from "../filter/index.js";
import { VERSION } from "../version.js";
import { Exit, ownsUsageErrors } from "./exit.js";

// `muster find | head` closes our stdout early: that is not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

const program = new Command("muster")
  .description("Take servers from first boot to Puppet-managed, then run the fleet by what the machines are.")
  .version(VERSION, "-v, --version")
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride();
// A daemon loads only its own command: every other command's imports (the provisioner, the lab,
// their HTTP and JetStream stacks) would stay resident in each node's `muster server` for nothing.
// Idle memory of the node daemon is a tracked figure (npm run bench, docs/bench.md).
const daemons: Record<string, () => Promise<() => Command>> = {
  server: async () => (await import("./commands/server.js")).serverCommand,
};
const only = daemons[process.argv[2] ?? ""];
const commands = only ? [await only()] : (await import("./commands/index.js")).commands;
for (const make of commands) program.addCommand(make());
// Every command at every depth (`broker users`, `provision retry`...) throws its usage errors to
// fail() below instead of letting commander exit 1 on its own.
const overrideExits = (cmd: Command): void => {
  if (!ownsUsageErrors.has(cmd)) cmd.exitOverride();
  for (const sub of cmd.commands) overrideExits(sub);
};
for (const cmd of program.commands) overrideExits(cmd);

function fail(e: unknown): never {
  if (e instanceof CommanderError) {
    // help and version exit 0; usage errors (already printed by commander) exit 64
    process.exit(e.exitCode === 0 ? 0 : Exit.Usage);
  }
  if (e instanceof FilterError) {
    process.stderr.write(`muster: ${e.render()}\n`);
    process.exit(1);
  }
  if (e instanceof MusterError) {
    process.stderr.write(`muster: ${e.message}\n`);
    process.exit(e.code === "MUSTER_USAGE" ? Exit.Usage : 1);
  }
  process.stderr.write(`muster: unexpected error: ${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(1);
}

try {
  await program.parseAsync(process.argv);
} catch (e) {
  fail(e);
}
