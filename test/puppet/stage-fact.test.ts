import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { factFileContent, factFileKind, parseConfigPrint, PuppetAgent, writeFactFile } from "../../src/puppet/index.js";
import { execCommand } from "../../src/puppet/exec.js";
import { defaultStageFactFile, resolveSettings } from "../../src/agents/provision/state.js";
import { RpcError } from "../../src/errors.js";

// Facts that outlive a run (the persisted lifecycle_stage) and where Puppet's classes file is,
// checked against the real puppet and facter with a node's own confdir/vardir (no puppetserver).

/** Facter and Puppet read FACTER_* from the environment: these checks must start without any. */
function envWithoutFacter(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^FACTER_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

describe("fact files (pure)", () => {
  it("knows the kind by extension and refuses what Facter would not read", () => {
    assert.equal(factFileKind("/etc/facter/facts.d/x.yaml"), "yaml");
    assert.equal(factFileKind("/etc/facter/facts.d/x.yml"), "yaml");
    assert.equal(factFileKind("/v/facts/x.rb"), "rb");
    assert.equal(factFileKind("/v/facts/x.sh"), undefined);
    assert.throws(() => factFileContent("/x/stage.conf", "lifecycle_stage", "production"), /must end in \.yaml/);
    assert.throws(() => factFileContent("/x/s.yaml", "bad-name", "production"), /invalid fact name/);
  });

  it("writes each format so the value survives quoting", () => {
    assert.match(factFileContent("/a/s.yaml", "lifecycle_stage", "production"), /^lifecycle_stage: "production"$/m);
    assert.equal(factFileContent("/a/s.json", "lifecycle_stage", "production"), `{"lifecycle_stage":"production"}\n`);
    assert.match(factFileContent("/a/s.txt", "lifecycle_stage", "production"), /^lifecycle_stage=production$/m);
    assert.match(factFileContent("/a/s.rb", "lifecycle_stage", "it's"), /setcode \{ 'it\\'s' \}/);
  });

  it("parses puppet config print output for one setting and for several", () => {
    assert.deepEqual(parseConfigPrint(["classfile"], "/v/state/classes.txt\n"), { classfile: "/v/state/classes.txt" });
    assert.deepEqual(parseConfigPrint(["classfile", "statedir"], "Warning: Facter: x\nclassfile = /s/classes.txt\nstatedir = /s\n"), { classfile: "/s/classes.txt", statedir: "/s" });
  });

  it("stage_fact_file: Facter's system directory by default; a path Facter would not read is refused", () => {
    assert.equal(resolveSettings({}, "n1").stageFactFile, "/etc/facter/facts.d/muster_lifecycle_stage.yaml");
    assert.equal(defaultStageFactFile("stage"), "/etc/facter/facts.d/muster_stage.yaml");
    assert.equal(resolveSettings({ stage_fact_file: "/v/facts/s.rb" }, "n1").stageFactFile, "/v/facts/s.rb");
    assert.throws(() => resolveSettings({ stage_fact_file: "relative/s.yaml" }, "n1"), (e: unknown) => e instanceof RpcError && /stage_fact_file must be an absolute path/.test(e.message));
    assert.throws(() => resolveSettings({ stage_fact_file: "/etc/facter/facts.d/s.conf" }, "n1"), (e: unknown) => e instanceof RpcError && /stage_fact_file/.test(e.message));
  });
});

describe("with the real puppet and facter", () => {
  let work: string;
  const node = () => {
    const base = mkdtempSync(join(work, "node-"));
    const dirs = { confdir: join(base, "etc"), vardir: join(base, "var"), ssldir: join(base, "ssl"), codedir: join(base, "code") };
    mkdirSync(dirs.confdir, { recursive: true });
    return { base, ...dirs, args: ["--confdir", dirs.confdir, "--vardir", dirs.vardir, "--codedir", dirs.codedir, "--logdir", join(base, "log"), "--rundir", join(base, "run"), "--publicdir", join(dirs.vardir, "public")] };
  };
  /** `puppet facts show NAME` for the node: what a Puppet run of that node would see. */
  const puppetFact = async (n: ReturnType<typeof node>, name: string, env: Record<string, string> = {}) => {
    const r = await execCommand("puppet", ["facts", "show", name, ...n.args, "--render-as", "json"], { env: envWithoutFacter(env), timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.output);
    const json = r.output.slice(r.output.indexOf("{"));
    return (JSON.parse(json) as Record<string, unknown>)[name];
  };

  before(() => {
    work = mkdtempSync(join(tmpdir(), "muster-stage-fact-"));
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it("a custom fact in <vardir>/facts (on Puppet's default factpath) gives every later run the stage; FACTER_ still wins", async () => {
    const n = node();
    assert.equal((await puppetFact(n, "lifecycle_stage")) || "", "", "no stage before the file exists");
    const file = join(n.vardir, "facts", "muster_lifecycle_stage.rb");
    assert.equal(writeFactFile(file, "lifecycle_stage", "production"), true);
    assert.equal(writeFactFile(file, "lifecycle_stage", "production"), false, "an unchanged file is left alone");
    assert.deepEqual(readdirSync(join(n.vardir, "facts")), ["muster_lifecycle_stage.rb"], "no temp file left behind");
    assert.equal(await puppetFact(n, "lifecycle_stage"), "production");
    assert.equal(await puppetFact(n, "lifecycle_stage", { FACTER_lifecycle_stage: "bootstrap" }), "bootstrap");
    // the node next door has its own vardir, so its own stage
    assert.equal((await puppetFact(node(), "lifecycle_stage")) || "", "");
  });

  it("an external fact file (the real-machine default's format) is read by facter from its directory", async () => {
    const dir = join(work, "facts.d");
    const file = join(dir, "muster_lifecycle_stage.yaml");
    writeFactFile(file, "lifecycle_stage", "production");
    const r = await execCommand("facter", ["--external-dir", dir, "lifecycle_stage"], { env: envWithoutFacter(), timeoutMs: 60_000 });
    assert.equal(r.output.trim().split("\n").pop(), "production", r.output);
  });

  it("the real-machine default (/etc/facter/facts.d) is what puppet reads as root, checked in a private mount namespace", async (t) => {
    // /etc is overlaid inside the namespace only: nothing reaches the machine's real /etc/facter,
    // which every lab node on this machine would read.
    const ov = join(work, "overlay");
    for (const d of ["upper", "work", "merged"]) mkdirSync(join(ov, d), { recursive: true });
    const n = node();
    const facts = join(import.meta.dirname, "..", "..", "src", "puppet", "facts.js");
    const state = join(import.meta.dirname, "..", "..", "src", "agents", "provision", "state.js");
    const writer = `const { writeFactFile } = await import(${JSON.stringify(facts)}); const { resolveSettings } = await import(${JSON.stringify(state)}); const s = resolveSettings({}, "n1"); writeFactFile(s.stageFactFile, s.stageFact, "production"); console.log(s.stageFactFile);`;
    const show = `puppet facts show lifecycle_stage ${n.args.join(" ")} --render-as json 2>/dev/null`;
    const script = [
      "set -e",
      "mount --make-rprivate /",
      `mount -t overlay overlay -o lowerdir=/etc,upperdir=${ov}/upper,workdir=${ov}/work ${ov}/merged`,
      `mount --bind ${ov}/merged /etc`,
      `${JSON.stringify(process.execPath)} --input-type=module -e '${writer}'`,
      show,
      `FACTER_lifecycle_stage=bootstrap ${show}`,
    ].join("\n");
    const r = await execCommand("unshare", ["-m", "sh", "-c", script], { env: envWithoutFacter(), timeoutMs: 120_000 });
    if (r.code !== 0 && /unshare failed|Operation not permitted|permission denied|unknown filesystem type/i.test(r.output)) {
      // said in the skip's reason (the runner's summary lists skips by reason), with what refused it
      t.skip(`needs root and overlayfs in a mount namespace, and this machine refused: ${r.output.trim().split("\n").slice(-3).join(" / ")}`);
      return;
    }
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /^\/etc\/facter\/facts\.d\/muster_lifecycle_stage\.yaml$/m);
    const values = [...r.output.matchAll(/"lifecycle_stage":\s*"(\w+)"/g)].map((m) => m[1]);
    assert.deepEqual(values, ["production", "bootstrap"], r.output);
    assert.equal(existsSync("/etc/facter/facts.d/muster_lifecycle_stage.yaml"), false, "the real /etc was not touched");
  });

  it("an unwritable location is a clear MUSTER_PUPPET_FAILED error", () => {
    const blocker = join(work, "not-a-dir");
    writeFileSync(blocker, "x");
    assert.throws(() => writeFactFile(join(blocker, "s.yaml"), "lifecycle_stage", "production"), (e: unknown) => (e as { code?: string }).code === "MUSTER_PUPPET_FAILED" && /cannot write the fact file/.test((e as Error).message));
  });

  it("classfile follows puppet.conf, and `puppet apply --write-catalog-summary` writes it as agent runs do", async () => {
    const n = node();
    const agent = new PuppetAgent({ confdir: n.confdir, vardir: n.vardir, ssldir: n.ssldir, certname: "classes.test" });
    assert.equal(await agent.classfile(), join(n.vardir, "state", "classes.txt"));
    assert.equal(agent.defaultClassfile, join(n.vardir, "state", "classes.txt"));
    const statedir = join(n.base, "elsewhere");
    writeFileSync(join(n.confdir, "puppet.conf"), `[main]\nstatedir = ${statedir}\n`);
    assert.equal(await agent.classfile(), join(statedir, "classes.txt"));
    const r = await execCommand("puppet", ["apply", ...n.args, "--write-catalog-summary", "-e", "class role_web {}\ninclude role_web"], { env: envWithoutFacter(), timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.output);
    assert.ok(existsSync(join(statedir, "classes.txt")));
    assert.deepEqual(readFileSync(join(statedir, "classes.txt"), "utf8").trim().split("\n").sort(), ["role_web", "settings"]);
  });
});
