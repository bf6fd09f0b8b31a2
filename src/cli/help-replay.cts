import { readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

// `muster ... --help` prints a text that only a new build can change, yet rendering it costs a
// start-up with commander and the command's option definitions: about 8 ms of commander's own
// load and 10-20 ms in all over a bare node (issue 39; docs/bench.md, "Start-up"). The build
// renders every help text once, through the CLI itself (help-texts.ts), into help.json beside this
// module; main.cts (the bin) and main.ts replay the text when the arguments ask for exactly one. Anything else
// (a help with other options, an unknown word, a damaged or missing file) goes to commander, so
// the replay can only be the text commander would print. Help is rendered 80 columns wide
// everywhere (program.ts), terminal or not, so one text serves both. CommonJS, as main.cts is:
// main.cts requires it before any ES module loads, and main.ts imports it as well.

/** The file the build writes: `{ "<command path>": "<help text>" }`, "" for `muster --help`. */
export const HELP_TEXTS_FILE = join(__dirname, "help.json");

/**
 * The command path whose help `argv` (process.argv without node and the script) asks for, or
 * undefined when it asks for something else: `[path...] --help`, `[path...] -h`, `help [path...]`.
 * A path is words only: any option besides the one help flag leaves the choice to commander.
 */
export function helpPath(argv: readonly string[]): string | undefined {
  let words: readonly string[];
  const last = argv[argv.length - 1];
  if (last === "--help" || last === "-h") words = argv.slice(0, -1);
  else if (argv[0] === "help" && argv.length === 2) words = argv.slice(1); // commander's `help [command]` takes one
  else return undefined;
  if (!words.every((w) => /^[a-z][a-z0-9-]*$/.test(w))) return undefined;
  return words.join(" ");
}

/** The stored help text for `argv`, or undefined to let commander render it. Never throws. */
export function storedHelp(argv: readonly string[], env: NodeJS.ProcessEnv, file: string = HELP_TEXTS_FILE): string | undefined {
  if (env.MUSTER_HELP_REPLAY === "off") return undefined;
  const path = helpPath(argv);
  if (path === undefined) return undefined;
  try {
    const texts = JSON.parse(readFileSync(file, "utf8")) as unknown;
    if (typeof texts !== "object" || texts === null || !Object.hasOwn(texts, path)) return undefined;
    const text = (texts as Record<string, unknown>)[path];
    return typeof text === "string" && text.length > 0 ? text : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes `text` to standard output with write(2) itself. Touching process.stdout builds Node's
 * stream for it (a pipe's loads net and its streams): 3-4 ms, as much as the rest of a stored
 * help's start. A reader that has gone (EPIPE: `muster --help | head -1`) is not an error; a
 * non-blocking descriptor that is full (EAGAIN) gets the rest through process.stdout, which Node
 * flushes before the process exits.
 */
export function writeOut(text: string): void {
  const buf = Buffer.from(text);
  for (let at = 0; at < buf.length; ) {
    try {
      at += writeSync(1, buf, at);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "EPIPE") return;
      if (code !== "EAGAIN") throw e;
      process.stdout.on("error", () => undefined); // EPIPE later: the reader left, nothing to say
      process.stdout.write(buf.subarray(at));
      return;
    }
  }
}
