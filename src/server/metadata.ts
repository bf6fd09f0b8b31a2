import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import type { Logger } from "pino";

// Facts come from the real `facter --json`, merged with a YAML facts file (which wins, so operators
// can pin or add facts); classes from Puppet's classes.txt. All refreshed on an interval.

/**
 * Runs `facter --json`. Facter exits non-zero when some fact fails to resolve (in containers, for
 * instance, it cannot read /proc/1/environ) yet still prints every other fact: a JSON object on
 * stdout is used whatever the exit code, and `onPartial` hears about the failure.
 */
export function runFacter(command: string, timeoutMs = 60_000, onPartial?: (reason: string) => void): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, ["--json"], { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${command}: ${e.message} (apt-get install facter, or set facts.facter: false)`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      let v: unknown;
      try {
        v = JSON.parse(Buffer.concat(out).toString("utf8")) as unknown;
        if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
      } catch (e) {
        if (code !== 0) return reject(new Error(`${command} --json exited ${code}: ${err.slice(-500)}`));
        return reject(new Error(`${command} --json printed something that is not a JSON object: ${(e as Error).message}`));
      }
      if (code !== 0) onPartial?.(`${command} --json exited ${code} but printed facts; some did not resolve: ${err.slice(-500)}`);
      resolve(v as Record<string, unknown>);
    });
  });
}

export async function readFactsFile(path: string): Promise<Record<string, unknown>> {
  const v = parseYaml(await readFile(path, "utf8")) as unknown;
  if (v === null || v === undefined) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw new Error(`facts file ${path} must hold a mapping of fact names to values`);
  return v as Record<string, unknown>;
}

export async function readClassesFile(path: string): Promise<string[]> {
  const text = await readFile(path, "utf8");
  return [...new Set(text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean))].sort();
}

export interface FactSourceOptions {
  facter: boolean;
  facterCommand: string;
  factsFile?: string;
  classesFile?: string;
  extra: Record<string, unknown>;
  log: Logger;
}

/** Holds the node's current facts and classes; `refresh()` reloads them, keeping the last good set on error. */
export class FactSource {
  facts: Record<string, unknown> = {};
  classes: string[] = [];
  private facterFacts: Record<string, unknown> = {};
  constructor(private readonly opts: FactSourceOptions) {
    this.facts = { ...opts.extra };
  }

  async refresh(): Promise<void> {
    const { opts } = this;
    if (opts.facter) {
      try {
        this.facterFacts = await runFacter(opts.facterCommand, undefined, (reason) => opts.log.warn({ err: reason }, "facter reported errors; using the facts it resolved"));
      } catch (e) {
        opts.log.warn({ err: (e as Error).message }, "facter failed; keeping the previous facts");
      }
    }
    let fileFacts: Record<string, unknown> = {};
    if (opts.factsFile) {
      try {
        fileFacts = await readFactsFile(opts.factsFile);
      } catch (e) {
        opts.log.warn({ err: (e as Error).message, file: opts.factsFile }, "cannot read facts file; keeping the previous facts");
        return;
      }
    }
    this.facts = { ...this.facterFacts, ...opts.extra, ...fileFacts };
    if (opts.classesFile) {
      try {
        this.classes = await readClassesFile(opts.classesFile);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") opts.log.warn({ err: (e as Error).message }, "cannot read classes file");
        this.classes = [];
      }
    }
  }
}
