import type { Command } from "commander";
import { MusterError } from "../errors.js";
import { FilterError } from "../filter/error.js";
import { VERSION } from "../version.js";
import { Exit, ownsUsageErrors } from "./exit.js";

// The `muster` command itself, loaded by main.ts once the compile cache is on.

const { Command: CommandClass, CommanderError } = await import("commander");
const program = new CommandClass("muster")
  .description("Take servers from first boot to Puppet-managed, then run the fleet by what the machines are.")
  .version(VERSION, "-v, --version")
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride();
// Only the invoked command's module loads: every other command's imports (the provisioner, the
// lab, their HTTP and JetStream stacks) would cost each `muster find` its start-up time and stay
// resident in each node's `muster server` for nothing. Idle memory of the node daemon and CLI
// start-up are tracked figures (npm run bench, npm run bench:cli; docs/bench.md). `muster help
// <command>` loads that command. Without a known command (`muster --help`, `muster`, a typo to
// suggest a name for) no command module loads: the list is built from the index's synopses, and
// commander suggests names from the same index.
const { commands: index } = await import("./commands/index.js");
const known = (name: string | undefined) => (name !== undefined && Object.hasOwn(index, name) ? index[name]! : undefined);
const invoked = known(process.argv[2]) ?? (process.argv[2] === "help" ? known(process.argv[3]) : undefined);
if (invoked) program.addCommand((await invoked.load())());
else {
  // Listed, never run: argv[2] names no command, so commander dispatches to none of these.
  for (const [name, entry] of Object.entries(index)) {
    const listed = new CommandClass(name).description(entry.description);
    program.addCommand(listed.action(() => Promise.reject(new Error(`muster ${name} was dispatched to its --help listing, not its definition`))));
  }
  const commander = program.createHelp();
  program.configureHelp({
    subcommandTerm: (cmd) => {
      const entry = known(cmd.name());
      return entry ? `${cmd.name()}${entry.usage ? ` ${entry.usage}` : ""}` : commander.subcommandTerm(cmd);
    },
  });
}
// Every command at every depth (`broker users`, `provision retry`...) throws its usage errors to
// fail() below instead of letting commander exit 1 on its own. Help and usage are laid out 80
// columns wide on a terminal too: one text everywhere, which the build stores and main.ts replays
// (help-replay.cts).
const width = { getOutHelpWidth: () => 80, getErrHelpWidth: () => 80 };
const overrideExits = (cmd: Command): void => {
  if (!ownsUsageErrors.has(cmd)) cmd.exitOverride();
  cmd.configureOutput(width);
  for (const sub of cmd.commands) overrideExits(sub);
};
program.configureOutput(width);
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
