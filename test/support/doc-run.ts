import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { cliPath, repoRoot } from "./collective.js";
import { extractCommands, matchOutput, type DocCommand, type Extracted } from "./doc-commands.js";

// Running the docs' commands as written (docs/README.md says how): every command of README.md,
// docs/ (decisions included) and examples/agents/README.md goes through /bin/sh in a process group
// of its own, and must exit as its doc says and print what its doc shows.
// test/docs/commands.test.ts runs them against its fixture, except those RUN_ELSEWHERE gives to
// another test file: that file runs them, as written, against what only it has (the lab's booted
// machines, a real puppetserver) through docCommandsRunBy(), and checks at its end that it ran
// every one of them, so the list never claims a command that no test runs.

/** Doc commands another test file runs, with what that file has that the docs test does not. */
export const RUN_ELSEWHERE: Record<string, { has: string; commands: readonly string[] }> = {
  "test/lab/machines.test.ts": {
    has: "the lab brought up by ./scripts/lab.sh in a copy of the checkout: four booted machines, two real puppetservers, its console and receiver",
    commands: [
      "./scripts/lab.sh",
      "muster ping",
      "muster health",
      "muster find -F country=de",
      "muster facts country",
      "muster provision status",
      "muster provision retry node03.eu.lab",
      "muster doctor",
      "muster rpc rpcutil daemon_stats -I node01.eu.lab",
      "muster lab status",
      "muster lab add --machines 2",
      "muster lab exec node01.eu.lab -- systemctl status muster-server",
      "muster lab power cut node02.us.lab",
      "muster lab remove node05.eu.lab",
      "muster decommission --wait node05.eu.lab",
      "muster lab add --identity node05.eu.lab",
      "muster lab down",
      'muster find -W "environment=development customer=acme mysql::master"',
      'muster ssh -W "environment=development customer=acme mysql::master"',
      'muster nrpe check_load -W "environment=development customer=acme mysql::master"',
      "muster puppet runall 2 -C role::web",
      'muster resource file /srv/muster-lab/files/hello ensure=file content=hi -W "customer=acme mysql::master"',
      "muster find --dm registry -C role::web",
      "muster lab exec node02.us.lab -- cat /etc/webapp/webapp.conf",
      "muster ssh -I node01.eu.lab -- cat /etc/motd",
      "muster lab exec node02.us.lab -- systemctl is-active webapp",
      "muster puppet runall 2",
      "muster decommission web3.example.net",
      "muster decommission node07.eu.lab",
      "muster decommission --wait web3.example.net web4.example.net",
      "muster decommission --json old1.example.net",
    ],
  },
  "test/puppetdb/puppetdb.test.ts": {
    has: "a real PuppetDB (its own PostgreSQL) fed by a real puppetserver, and a registry daemon asking it",
    commands: [
      'muster find --dm puppetdb -W "environment=development customer=acme mysql::master"',
      "muster find --dm puppetdb -I 'pql:inventory[certname] { facts.country = \"de\" }'",
      "muster rpc rpcutil ping --dm puppetdb -F country=nl",
    ],
  },
  "test/health/alert-delivery.test.ts": {
    has: "a console's alerts kept in their history, an open alert of node05.eu.lab, a real notifier (muster server hosting notify) and its receivers",
    commands: ["muster alerts test", 'muster alerts ack node05.eu.lab --note "on it"'],
  },
  "test/fleet/puppet-real.test.ts": {
    has: "a real puppetserver and three nodes with real Puppet agents",
    commands: ["muster puppet runall 10 -C webserver", 'muster puppet runall 4 -S "puppet().since_lastrun>3600"'],
  },
};

/** The markdown files whose commands are tests. */
export function docFiles(): string[] {
  const md = (dir: string) =>
    readdirSync(join(repoRoot, dir))
      .filter((f) => f.endsWith(".md"))
      .sort()
      .map((f) => join(dir, f));
  return ["README.md", ...md("docs"), ...md("docs/decisions"), "examples/agents/README.md"];
}

/** Every doc file's commands and convention problems. */
export function readDocs(): Extracted[] {
  return docFiles().map((f) => extractCommands(f, readFileSync(join(repoRoot, f), "utf8")));
}

export interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Process groups of commands still running: killed when the test process exits, whatever happened. */
const groups = new Set<number>();
process.once("exit", () => {
  for (const g of groups) killGroup(g, "SIGKILL");
});

export function killGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
}

export interface ShellOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Killed (SIGKILL) past this: a hang, which the caller's assertions then report. */
  timeoutMs?: number;
  /** SIGTERM the command once its output matches (a daemon's ready line; the provisioner logs it to stderr). */
  until?: RegExp;
  /** Each chunk of output as it comes (long commands: their progress). */
  onOutput?: (text: string) => void;
}

/**
 * One command line through /bin/sh, in its own process group so that a signal reaches the command
 * and not only the shell. A simple command replaces the shell (exit code and signal are the
 * command's); a list or pipeline runs under it.
 */
export function runShell(command: string, o: ShellOptions): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const script = /[;&|]/.test(command) ? command : `exec ${command}`;
    const child = spawn("/bin/sh", ["-c", script], { cwd: o.cwd, env: o.env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    groups.add(child.pid!);
    let stdout = "";
    let stderr = "";
    let until = o.until;
    const seen = (d: Buffer) => {
      o.onOutput?.(d.toString());
      if (until?.test(stdout + stderr)) {
        until = undefined;
        killGroup(child.pid!, "SIGTERM");
      }
    };
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      seen(d);
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
      seen(d);
    });
    const timer = setTimeout(() => killGroup(child.pid!, "SIGKILL"), o.timeoutMs ?? 60_000);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      groups.delete(child.pid!);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Undefined when the command did what its doc says (its exit code, the output it shows), else what went wrong. */
export function docVerdict(cmd: DocCommand, r: Ran): string | undefined {
  const want = cmd.exit ?? 0;
  if (r.code !== want) return `exited ${r.code ?? r.signal}, the doc says ${want}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
  if (cmd.output && !cmd.illustrative) return matchOutput(cmd.output, r.stdout + r.stderr);
  return undefined;
}

/**
 * The doc commands RUN_ELSEWHERE gives to `file`: run(text) runs one as written and fails unless it
 * did what its doc says; ranAll() fails unless every one of them ran.
 */
export function docCommandsRunBy(file: string, o: Omit<ShellOptions, "until">): { run(text: string, x?: { timeoutMs?: number; onOutput?: (t: string) => void }): Promise<Ran>; ranAll(): void } {
  const mine = RUN_ELSEWHERE[file];
  assert.ok(mine, `${file} is not in RUN_ELSEWHERE (test/support/doc-run.ts)`);
  const shown = new Map(readDocs().flatMap((e) => e.commands.map((c) => [c.text, c] as const)));
  const ran = new Set<string>();
  return {
    async run(text, x = {}) {
      assert.ok(mine.commands.includes(text), `${text}: not one of ${file}'s doc commands in RUN_ELSEWHERE`);
      const cmd = shown.get(text);
      assert.ok(cmd, `no doc shows \`${text}\` any more: remove it from RUN_ELSEWHERE and from ${file}`);
      const r = await runShell(text, { ...o, ...x, onOutput: x.onOutput ?? o.onOutput });
      const why = docVerdict(cmd, r);
      assert.equal(why, undefined, `${cmd.file}:${cmd.line}: ${text}: ${why}`);
      ran.add(text);
      return r;
    },
    ranAll() {
      assert.deepEqual(
        mine.commands.filter((c) => !ran.has(c)),
        [],
        `${file} did not run these doc commands RUN_ELSEWHERE gives it`,
      );
    },
  };
}

/** PATH with `muster` (this checkout's CLI) first, linked in `dir`/bin: a shell on the fleet, as the docs' commands assume. */
export function pathWithMuster(dir: string, path = process.env.PATH ?? ""): string {
  const bin = join(dir, "bin");
  mkdirSync(bin, { recursive: true });
  if (!existsSync(join(bin, "muster"))) symlinkSync(cliPath, join(bin, "muster"));
  return `${bin}:${path}`;
}
