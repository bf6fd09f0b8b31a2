import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

// NRPE command definitions from nrpe.d/*.cfg. A file may hold other NRPE settings too
// (key=value; ignored here), comments (#) and blank lines. Whitespace around '=' is allowed, as
// NRPE strips it. Problems are collected with file:line so an operator can find them, and a
// broken line never hides the commands that parse.

export const COMMAND_NAME = /^[A-Za-z0-9_-]+$/;

export interface NrpeCommand {
  name: string;
  /** The command line after '=' (may contain $ARGn$). */
  line: string;
  /** file:line of the definition. */
  source: string;
}

export interface NrpeConfig {
  commands: Map<string, NrpeCommand>;
  /** Lines that could not be read, as `file:line: why`. */
  problems: string[];
}

export function parseNrpeConfig(text: string, file: string, into: NrpeConfig = { commands: new Map(), problems: [] }): NrpeConfig {
  text.split(/\r?\n/).forEach((raw, i) => {
    const where = `${file}:${i + 1}`;
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) {
      into.problems.push(`${where}: expected command[name]=command line or setting=value, got ${JSON.stringify(line.slice(0, 120))}`);
      return;
    }
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    if (!key.startsWith("command[") && !key.startsWith("command ")) return; // another NRPE setting
    const m = /^command\[([^\]]*)\]$/.exec(key);
    if (!m) {
      into.problems.push(`${where}: malformed command definition ${JSON.stringify(key.slice(0, 120))}; expected command[name]=command line`);
      return;
    }
    const name = m[1]!;
    if (!COMMAND_NAME.test(name)) {
      into.problems.push(`${where}: command name ${JSON.stringify(name)} must match ${COMMAND_NAME.source}`);
      return;
    }
    if (value === "") {
      into.problems.push(`${where}: command[${name}] has an empty command line`);
      return;
    }
    const previous = into.commands.get(name);
    if (previous) into.problems.push(`${where}: command[${name}] is defined again (first at ${previous.source}); the later definition wins`);
    into.commands.set(name, { name, line: value, source: where });
  });
  return into;
}

/** Every *.cfg in the directory, in name order. A missing or unreadable directory is a problem, not a crash. */
export function loadNrpeConfig(dir: string): NrpeConfig {
  const cfg: NrpeConfig = { commands: new Map(), problems: [] };
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith(".cfg")).sort();
  } catch (e) {
    cfg.problems.push(`${dir}: cannot read the NRPE configuration directory: ${(e as Error).message}`);
    return cfg;
  }
  for (const f of files) {
    const path = join(dir, f);
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (e) {
      cfg.problems.push(`${path}: cannot read: ${(e as Error).message}`);
      continue;
    }
    parseNrpeConfig(text, path, cfg);
  }
  return cfg;
}
