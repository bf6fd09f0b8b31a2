import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseCsr, csrFingerprint, normaliseFingerprint, PP_CLI_AUTH_OID, setIniSettings, readIniSection, readRunInterval, runIntervalOf, writeHostsEntry } from "../../src/puppet/index.js";
import { parseRunOutput } from "../../src/puppet/report.js";
import { validateInput } from "../../src/ddl/validate.js";
import { RpcError } from "../../src/errors.js";
import { Status } from "../../src/protocol/status.js";
import { puppetcaDDL } from "../../src/agents/puppetca/index.js";
import { provisionDDL } from "../../src/agents/provision/index.js";

// Pure parts of the Puppet layer: puppet.conf editing, hosts entries, CSR parsing (CSRs made
// by the real openssl), run output parsing, DDL input checks. No puppetserver needed.

describe("puppet.conf editing", () => {
  it("adds server settings to [main], keeping comments, other keys and sections", () => {
    const before = "# managed by hand\n[main]\nlogdir = /var/log/puppet\n\n[agent]\nruninterval = 1h\n";
    const after = setIniSettings(before, "main", { server: "127.0.0.9", serverport: 8141 });
    assert.equal(after, "# managed by hand\n[main]\nlogdir = /var/log/puppet\nserver = 127.0.0.9\nserverport = 8141\n\n[agent]\nruninterval = 1h\n");
  });

  it("replaces keys in place and removes undefined ones", () => {
    const t = setIniSettings("[main]\nserver = old\nmasterport = 1\nca_server = x\n", "main", { server: "new", masterport: undefined });
    assert.equal(t, "[main]\nserver = new\nca_server = x\n");
  });

  it("treats keys before any header as [main], and creates missing sections", () => {
    const t = setIniSettings("server = a\n[agent]\nnoop = true\n", "main", { server: "b" });
    assert.equal(t, "server = b\n[agent]\nnoop = true\n");
    assert.equal(setIniSettings("", "main", { server: "c" }), "[main]\nserver = c\n");
    assert.deepEqual(readIniSection("[main]\nserver = c\n[agent]\nserver = d\n", "agent"), { server: "d" });
  });

  it("refuses multi-line values", () => {
    assert.throws(() => setIniSettings("", "main", { server: "a\n[evil]" }), /one line/);
  });
});

describe("puppet.conf's runinterval", () => {
  it("reads [agent] over [main], in Puppet's duration syntax, and says what the real puppet says", () => {
    const cases: [string, number][] = [
      ["", 1800],
      ["[main]\nruninterval = 2h\n", 7200],
      ["[main]\nruninterval = 2h\n[agent]\nruninterval = 45m\n", 2700],
      ["[agent]\nruninterval = 600\n", 600],
      ["[agent]\nruninterval = 1d\n", 86_400],
      ["[agent]\nruninterval = 90s\n", 90],
    ];
    const dir = mkdtempSync(join(tmpdir(), "muster-runinterval-"));
    try {
      for (const [conf, seconds] of cases) {
        assert.equal(runIntervalOf(conf), seconds, conf);
        writeFileSync(join(dir, "puppet.conf"), conf);
        assert.equal(readRunInterval(dir), seconds, conf);
        const real = execFileSync("puppet", ["config", "print", "runinterval", "--section", "agent", "--confdir", dir, "--vardir", join(dir, "var")], { encoding: "utf8" });
        assert.equal(Number(real.trim()), seconds, `the real puppet reads ${JSON.stringify(conf)} as ${real.trim()}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("falls back to Puppet's 30 minutes for what says nothing of when a run is due: 0, garbage, no file", () => {
    for (const conf of ["[agent]\nruninterval = 0\n", "[agent]\nruninterval = soon\n", "[agent]\nruninterval = -5\n", "[agent]\nruninterval = 1w\n", "[agent]\nruninterval = 99999999999999999999\n"]) assert.equal(runIntervalOf(conf), 1800, conf);
    assert.equal(readRunInterval("/nonexistent/muster-confdir"), 1800);
  });
});

describe("hosts file entries", () => {
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), "muster-hosts-"))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("points `puppet` at the master and keeps other entries", () => {
    const path = join(dir, "hosts");
    writeFileSync(path, "127.0.0.1\tlocalhost\n10.0.0.5 puppet puppetdb # old master\n");
    writeHostsEntry(path, "127.0.0.42");
    assert.equal(readFileSync(path, "utf8"), "127.0.0.1\tlocalhost\n10.0.0.5\tpuppetdb # old master\n127.0.0.42\tpuppet\t# muster provision\n");
    writeHostsEntry(path, "127.0.0.43");
    assert.match(readFileSync(path, "utf8"), /^127\.0\.0\.43\tpuppet/m);
    assert.doesNotMatch(readFileSync(path, "utf8"), /127\.0\.0\.42/);
  });
});

describe("CSR parsing", () => {
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), "muster-csr-"))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  const makeCsr = (name: string, ...addext: string[]): string => {
    const key = join(dir, `${name}.key`);
    const csr = join(dir, `${name}.csr`);
    execFileSync("openssl", ["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-subj", `/CN=${name}`, "-out", csr, ...addext.flatMap((e) => ["-addext", e])], { stdio: "ignore" });
    return readFileSync(csr, "utf8");
  };

  it("computes the fingerprint over the DER, as openssl does", () => {
    const pem = makeCsr("plain.example");
    const der = execFileSync("openssl", ["req", "-in", join(dir, "plain.example.csr"), "-outform", "DER"]);
    const want = execFileSync("openssl", ["dgst", "-sha256", "-hex"], { input: der }).toString().trim().split(/\s+/).pop()!.toUpperCase().match(/../g)!.join(":");
    assert.equal(csrFingerprint(pem), want);
    const p = parseCsr(pem);
    assert.equal(p.fingerprint, want);
    assert.equal(p.commonName, "plain.example");
    assert.deepEqual(p.altNames, []);
    assert.deepEqual(p.extensions, []);
  });

  it("reads alternative names and Puppet's pp_cli_auth extension request", () => {
    const p = parseCsr(makeCsr("evil.example", "subjectAltName=DNS:evil.example,IP:10.1.2.3,email:a@b.c", `${PP_CLI_AUTH_OID}=ASN1:UTF8String:true`));
    assert.deepEqual(p.altNames, [
      { type: "DNS", value: "evil.example" },
      { type: "IP", value: "10.1.2.3" },
      { type: "email", value: "a@b.c" },
    ]);
    assert.ok(p.extensions.some((e) => e.oid === PP_CLI_AUTH_OID));
  });

  it("normalises fingerprints as users write them", () => {
    const fp = "AB:".repeat(31) + "CD";
    assert.equal(normaliseFingerprint(fp.toLowerCase()), fp);
    assert.equal(normaliseFingerprint(fp.replace(/:/g, "")), fp);
    assert.equal(normaliseFingerprint(`(SHA256) ${fp}`), fp);
  });
});

describe("puppet output parsing", () => {
  it("finds failed resources and errors, ignoring Facter noise", () => {
    const out = [
      "Error: Facter: Permission denied @ rb_sysopen - /proc/1/environ",
      "Info: Applying configuration version '1'",
      "Error: Could not set 'file' on ensure: No such file or directory - A directory component in /nope/x does not exist or is a dangling symbolic link",
      "Error: /Stage[main]/Main/File[/nope/x]/ensure: change from 'absent' to 'file' failed: Could not set 'file' on ensure: No such file",
      "Notice: Applied catalog in 0.02 seconds",
    ].join("\n");
    const r = parseRunOutput(out);
    assert.deepEqual(r.failedResources.map((f) => f.resource), ["File[/nope/x]"]);
    assert.equal(r.errors.length, 2);
  });
});

describe("DDL input checks", () => {
  const code = (f: () => unknown): number | undefined => {
    try {
      f();
      return undefined;
    } catch (e) {
      return e instanceof RpcError ? e.status : -1;
    }
  };
  it("set_puppet_host wants an IPv4 address", () => {
    assert.equal(code(() => validateInput(provisionDDL, "set_puppet_host", { ipaddress: "127.0.0.5", port: 8140 })), undefined);
    assert.equal(code(() => validateInput(provisionDDL, "set_puppet_host", { ipaddress: "puppet.example" })), Status.InvalidData);
    assert.equal(code(() => validateInput(provisionDDL, "set_puppet_host", {})), Status.MissingData);
  });
  it("sign wants a certname and a SHA-256 fingerprint", () => {
    const fp = "0A:".repeat(31) + "0B";
    assert.equal(code(() => validateInput(puppetcaDDL, "sign", { certname: "n1.example", fingerprint: fp })), undefined);
    assert.equal(code(() => validateInput(puppetcaDDL, "sign", { certname: "n1.example", fingerprint: fp.replace(/:/g, "") })), undefined);
    assert.equal(code(() => validateInput(puppetcaDDL, "sign", { certname: "n1.example" })), Status.MissingData);
    assert.equal(code(() => validateInput(puppetcaDDL, "sign", { certname: "../etc", fingerprint: fp })), Status.InvalidData);
    assert.equal(code(() => validateInput(puppetcaDDL, "sign", { certname: "n1", fingerprint: "00:11" })), Status.InvalidData);
  });
});
