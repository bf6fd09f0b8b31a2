import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort } from "../support/index.js";
import { cleanEnv, runCli, tempDir } from "../support/collective.js";

// Usage errors exit 64 in every command, at every depth, and are found before anything connects:
// MUSTER_BROKER names a loopback port nobody listens on, so a command that tried to connect would
// fail with "cannot reach the NATS broker" (exit 1) instead. `muster nrpe` is a Nagios check:
// its usage errors are UNKNOWN (3) with a `COMMAND: UNKNOWN: why` line, never 64.

const tmp = tempDir("usage");
after(() => tmp.remove());
const env = async () => cleanEnv(join(tmp.path, "config"), { MUSTER_BROKER: `nats://127.0.0.1:${await freePort()}` });

const USAGE: string[][] = [
  ["no-such-command"],
  ["ping", "--no-such-option"],
  ["ping", "--dt", "0"],
  ["find", "--dm", "carrier-pigeon"],
  ["find", "-F"],
  ["find", "--dm", "flatfile"],
  ["facts"],
  ["facts", "country", "--limit", "0%"],
  ["inventory"],
  ["rpc"],
  ["rpc", "rpcutil", "ping", "--batch", "0"],
  ["rpc", "rpcutil", "get_fact", "os.family"],
  ["emulate"],
  ["emulate", "--count", "0"],
  ["server", "--no-such-option"],
  ["provisioner"],
  ["provision", "retry"],
  ["provision", "no-such-subcommand"],
  ["provision", "status", "--no-such-option"],
  ["registry", "query", "--no-such-option"],
  ["registry", "serve", "--no-such-option"],
  ["resource"],
  ["resource", "file", "/tmp/x", "ensure"],
  ["resource", "file", "/tmp/x", "ensure=file", "ensure=absent"],
  ["puppet", "runall"],
  ["puppet", "runall", "0"],
  ["puppet", "runall", "2", "--cycles", "3"],
  ["puppet", "runonce", "--splaylimit", "soon"],
  ["puppet", "summary", "--display", "some"],
  ["broker", "users"],
  ["broker", "no-such-subcommand"],
  ["lab", "no-such-subcommand"],
  ["ssh", "--no-such-option"],
  ["doctor", "--no-such-option"],
];

test("every usage error exits 64, before connecting", async () => {
  const e = await env();
  const wrong: string[] = [];
  for (const args of USAGE) {
    const r = await runCli(args, { env: e, cwd: tmp.path, timeoutMs: 20_000 });
    if (r.code !== 64) wrong.push(`muster ${args.join(" ")}: exit ${r.code}\n${r.stderr.trim()}`);
    else if (!/error|usage|muster:/i.test(r.stderr)) wrong.push(`muster ${args.join(" ")}: exit 64 but says nothing on stderr`);
  }
  assert.deepEqual(wrong, []);
});

test("help and version exit 0", async () => {
  const e = await env();
  for (const args of [["--help"], ["-v"], ["provision", "retry", "--help"], ["nrpe", "--help"]]) {
    const r = await runCli(args, { env: e, cwd: tmp.path });
    assert.equal(r.code, 0, `muster ${args.join(" ")}: ${r.stderr}`);
  }
});

const NRPE: [string[], RegExp][] = [
  [["nrpe"], /^NRPE: UNKNOWN: missing required argument 'command'/],
  [["nrpe", "check_args", "-I", "web1", "-w", "20%"], /^check_args: UNKNOWN: unknown option '-w'; plugin arguments that start with '-' go after --/],
  [["nrpe", "check_load", "--batch", "0"], /^check_load: UNKNOWN: .*--batch takes a positive whole number/],
  [["nrpe", "-I", "web1", "check_load", "--dm", "pigeon"], /^check_load: UNKNOWN: .*Allowed choices/],
  [["nrpe", "check_load", "--limit", "0"], /^check_load: UNKNOWN: /],
  [["nrpe", "check_load", "-S", "country=de and ("], /^check_load: UNKNOWN: /],
  [["nrpe", "check_load", "--dm", "flatfile"], /^check_load: UNKNOWN: --dm flatfile needs --nodes FILE/],
];

test("muster nrpe: every usage error is COMMAND: UNKNOWN: why on stdout, exit 3", async () => {
  const e = await env();
  for (const [args, line] of NRPE) {
    const r = await runCli(args, { env: e, cwd: tmp.path });
    assert.equal(r.code, 3, `muster ${args.join(" ")}: exit ${r.code}\n${r.stdout}${r.stderr}`);
    assert.match(r.stdout.split("\n")[0]!, line, `muster ${args.join(" ")}`);
  }
});
