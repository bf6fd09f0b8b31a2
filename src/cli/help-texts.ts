import { execFile } from "node:child_process";
import { promisify } from "node:util";

// Every help text of the CLI, at every depth, as `muster` itself prints it through commander: what
// the build stores for help-replay.cts, and what test/cli/help.test.ts compares the replay with.

const execFileP = promisify(execFile);

/** Subcommand names from a help text's `Commands:` section (commander's own `help` left out). */
export function subcommandsOf(help: string): string[] {
  const section = (help.split(/^Commands:$/m)[1] ?? "").split("\n\n")[0]!;
  return [...section.matchAll(/^ {2}([a-z][a-z0-9-]*)\b/gm)].map((m) => m[1]!).filter((n) => n !== "help");
}

/**
 * Walks the command tree level by level from `muster --help`, each text printed by a process of
 * its own (`run`), and returns them by command path ("" for the top). A help that fails throws:
 * the build must not store half a tree.
 */
export async function walkHelpTexts(run: (args: string[]) => Promise<string>): Promise<Map<string, string>> {
  const texts = new Map<string, string>();
  let level: string[][] = [[]];
  while (level.length) {
    const outs = await Promise.all(level.map((path) => run([...path, "--help"])));
    const next: string[][] = [];
    outs.forEach((out, i) => {
      const path = level[i]!;
      texts.set(path.join(" "), out);
      for (const sub of subcommandsOf(out)) next.push([...path, sub]);
    });
    level = next;
  }
  return texts;
}

/** The environment help is rendered in: none of the caller's muster settings, no caches written. */
export function renderEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) if (!k.startsWith("MUSTER_") && !k.startsWith("XDG_") && !k.startsWith("NODE_")) clean[k] = v;
  return { ...clean, MUSTER_HELP_REPLAY: "off", MUSTER_COMPILE_CACHE: "off", NO_COLOR: "1" };
}

/** Every help text of the CLI at `cliPath`, rendered by `node` (commander, never a replay). */
export async function renderHelpTexts(cliPath: string, node = process.execPath, env: NodeJS.ProcessEnv = process.env): Promise<Record<string, string>> {
  const childEnv = renderEnv(env);
  const texts = await walkHelpTexts(async (args) => {
    const { stdout } = await execFileP(node, [cliPath, ...args], { env: childEnv, maxBuffer: 1 << 20, timeout: 120_000 });
    if (!stdout) throw new Error(`muster ${args.join(" ")} printed no help`);
    return stdout;
  });
  return Object.fromEntries(texts);
}
