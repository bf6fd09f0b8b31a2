// From an NRPE command definition and the caller's arguments to an argv, with no shell.
//
// NRPE hands `command[x]=...` to /bin/sh after replacing $ARGn$. muster runs the program
// directly instead: arguments are substituted first, then the line is split into words the way
// sh would split it (quotes and backslashes honoured, unquoted $ARGn$ values split on
// whitespace), and anything that only a shell could do (pipes, redirections, ;, &&, $VAR, `...`)
// is refused with a message saying so. Since arguments may not contain quotes, backslashes or
// other metacharacters, an argument can add words but never change how the line is read.

/** NRPE's NASTY_METACHARS plus " $ and NUL. */
export const NASTY_METACHARS = "|`&><'\"\\[]{};$\r\n\0";
/** NRPE substitutes $ARG1$ to $ARG16$. */
export const MAX_ARGS = 16;

export class CommandLineError extends Error {
  override name = "CommandLineError";
}

/** check_nrpe's -a arguments arrive joined with '!'. */
export function splitArgs(args: string | undefined): string[] {
  return args === undefined || args === "" ? [] : args.split("!");
}

/** Why the arguments are unacceptable, or undefined. */
export function argumentsProblem(args: readonly string[]): string | undefined {
  if (args.length > MAX_ARGS) return `too many arguments: ${args.length} (NRPE substitutes $ARG1$ to $ARG${MAX_ARGS}$)`;
  for (const [i, a] of args.entries()) {
    const bad = [...a].find((c) => NASTY_METACHARS.includes(c));
    if (bad !== undefined) return `argument ${i + 1} contains the shell metacharacter ${JSON.stringify(bad)}, which NRPE refuses`;
  }
  return undefined;
}

/** Replaces $ARGn$ with the n-th argument ("" when not given), as NRPE does. */
export function substituteArgs(line: string, args: readonly string[]): string {
  return line.replace(/\$ARG(\d+)\$/g, (_m, n: string) => args[Number(n) - 1] ?? "");
}

const SHELL_ONLY = "|&;<>()`$";
const WS = /\s/;

/** Splits a command line into words as sh would, refusing what needs a shell. */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  let cur = "";
  let inWord = false;
  const needsShell = (c: string): never => {
    throw new CommandLineError(`it uses ${JSON.stringify(c)}, which needs a shell; muster runs checks without one (put the pipeline in a script and point the command at it)`);
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (WS.test(c)) {
      if (inWord) words.push(cur);
      cur = "";
      inWord = false;
    } else if (c === "#" && !inWord) {
      break; // a comment, as in sh
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new CommandLineError("it has an unterminated single quote");
      cur += line.slice(i + 1, end);
      inWord = true;
      i = end;
    } else if (c === '"') {
      inWord = true;
      for (i++; ; i++) {
        if (i >= line.length) throw new CommandLineError("it has an unterminated double quote");
        const d = line[i]!;
        if (d === '"') break;
        if (d === "$" || d === "`") needsShell(d);
        if (d === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1]!)) cur += line[++i];
        else cur += d;
      }
    } else if (c === "\\") {
      if (i + 1 >= line.length) throw new CommandLineError("it ends with a lone backslash");
      cur += line[++i];
      inWord = true;
    } else if (SHELL_ONLY.includes(c)) {
      needsShell(c);
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (inWord) words.push(cur);
  if (words.length === 0) throw new CommandLineError("it names no program");
  if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!)) throw new CommandLineError("it starts with a variable assignment, which needs a shell");
  return words;
}

/** The argv for a definition and the caller's arguments. */
export function commandArgv(line: string, args: readonly string[]): string[] {
  return splitCommandLine(substituteArgs(line, args));
}
