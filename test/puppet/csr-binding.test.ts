import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { startPuppetserver, type PuppetserverHandle } from "../../src/lab/puppetserver.js";
import { NODE_KEY_CSR_OID } from "../../src/protocol/node-keys.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { CertificateAuthority, PuppetAgent, SignRefusedError, caSettingsFromSsldir } from "../../src/puppet/index.js";
import { extensionString, parseCsr } from "../../src/puppet/csr.js";
import { stringify as toYaml } from "yaml";
import { MusterClient } from "../../src/client/client.js";
import { mastersCheck } from "../../src/cli/doctor-site.js";
import { MusterError } from "../../src/errors.js";
import { cleanEnv, spawnMuster, startBroker, tempDir, type MusterProcess } from "../support/collective.js";

// Issue 13: the node's key is bound into its CSR (csr_attributes.yaml extension_requests, made by
// the real puppet agent) and a real puppetserver's CA is asked to sign only a CSR naming the key
// the provisioner pinned. Another key, or no key, is refused and nothing is signed.

const host = "127.0.0.74";
const tmp = tempDir("csr-binding");
let master: PuppetserverHandle | undefined;
let ca: CertificateAuthority;
const node = generateSigningKey("node").key.publicKey;
const other = generateSigningKey("mallory").key.publicKey;

function agent(id: string): PuppetAgent {
  const d = { confdir: join(tmp.path, id, "conf"), vardir: join(tmp.path, id, "var"), ssldir: join(tmp.path, id, "ssl") };
  for (const p of Object.values(d)) mkdirSync(p, { recursive: true });
  const a = new PuppetAgent({ ...d, certname: id });
  a.setPuppetHost(host, master!.port);
  return a;
}

before(async () => {
  master = await startPuppetserver({ host });
  console.log(`# puppetserver ready on ${master.url} in ${master.startMs} ms`);
  ca = new CertificateAuthority(caSettingsFromSsldir(master.url, master.ssldir, master.certname));
});

after(async () => {
  await master?.stop();
  tmp.remove();
});

test("the node key goes into csr_attributes.yaml beside what the file held, and into the real agent's CSR", async () => {
  const a = agent("keeps.csr.test");
  writeFileSync(join(tmp.path, "keeps.csr.test", "conf", "csr_attributes.yaml"), "custom_attributes:\n  1.2.840.113549.1.9.7: hunter2\nextension_requests:\n  pp_role: web\n");
  const req = await a.requestCertificate({ timeoutMs: 120_000, nodeKey: node });
  const attrs = parseYaml(readFileSync(join(tmp.path, "keeps.csr.test", "conf", "csr_attributes.yaml"), "utf8")) as Record<string, Record<string, string>>;
  assert.deepEqual(attrs.extension_requests, { pp_role: "web", [NODE_KEY_CSR_OID]: node });
  assert.equal(attrs.custom_attributes!["1.2.840.113549.1.9.7"], "hunter2");
  const csr = parseCsr(readFileSync(req.csrPath, "utf8"));
  assert.equal(extensionString(csr.extensions.find((e) => e.oid === NODE_KEY_CSR_OID)!), node);
  await ca.clean("keeps.csr.test");
});

test("the CA signs only a CSR naming the pinned key: another key and no key are refused, nothing signed", async () => {
  const id = "bound.csr.test";
  const req = await agent(id).requestCertificate({ timeoutMs: 120_000, nodeKey: node });
  await assert.rejects(ca.sign(id, req.fingerprint, other), (e: unknown) => e instanceof SignRefusedError && e.reason === "node_key_mismatch" && e.message.includes(`names node key ${node}, but ${other} is pinned`));
  assert.equal((await ca.status(id))?.state, "requested", "still unsigned");
  const signed = await ca.sign(id, req.fingerprint, node);
  assert.equal(signed.state, "signed");
  // Puppet copies the ppPrivCertExt request into the certificate: the key is in the cert too
  const certPem = await ca.certPem(id);
  const text = execFileSync("openssl", ["x509", "-noout", "-text"], { input: certPem!, encoding: "utf8" });
  assert.match(text, new RegExp(`${NODE_KEY_CSR_OID.replace(/\./g, "\\.")}:\\s*\\n\\s*.*${node.replace(/[+/]/g, "\\$&")}`));

  const bare = "keyless.csr.test";
  const r2 = await agent(bare).requestCertificate({ timeoutMs: 120_000 });
  await assert.rejects(ca.sign(bare, r2.fingerprint, node), (e: unknown) => e instanceof SignRefusedError && e.reason === "node_key_mismatch" && /does not name the node's key/.test(e.message));
  assert.equal((await ca.status(bare))?.state, "requested", "still unsigned");
});

test("reached by an address, the CA's certificate is checked for the name it must carry (servername): its own name passes, another is refused", async () => {
  const settings = caSettingsFromSsldir(master!.url, master!.ssldir, master!.certname);
  const own = new CertificateAuthority({ ...settings, servername: master!.certname });
  assert.ok(Array.isArray((await own.list()).signed));
  const elsewhere = new CertificateAuthority({ ...settings, servername: "puppet-eu.elsewhere.test" });
  await assert.rejects(elsewhere.list(), (e: unknown) => e instanceof MusterError && /altnames|does not match/i.test(e.message));
});

test("muster doctor's masters check: a master whose CA answers on a certificate for its identity passes; one whose CA's certificate names another fails, saying so", async () => {
  const broker = await startBroker();
  const keys = join(tmp.path, "doctor-keys");
  const servers: MusterProcess[] = [];
  // a muster server hosting puppetca for this puppetserver, as a site's master does (loopback, servername its identity)
  const master_ = (identity: string) => {
    const d = join(tmp.path, `doctor-${identity}`);
    mkdirSync(d, { recursive: true });
    const cfg = {
      identity,
      collectives: ["muster"],
      brokers: [broker.url],
      facts: { facter: false },
      agents: { builtin: ["puppetca"] },
      plugins: { puppetca: { url: master!.url, servername: identity, cacert: join(master!.ssldir, "certs", "ca.pem"), cert: join(master!.ssldir, "certs", `${master!.certname}.pem`), key: join(master!.ssldir, "private_keys", `${master!.certname}.pem`) } },
      registration: { interval: 0, splay: false },
    };
    writeFileSync(join(d, "server.yaml"), toYaml(cfg));
    const p = spawnMuster(["server", "--config", join(d, "server.yaml")], { env: cleanEnv(keys) });
    servers.push(p);
    return p.waitForLine(/ready/, 30_000);
  };
  const before_ = process.env.MUSTER_CONFIG_DIR;
  process.env.MUSTER_CONFIG_DIR = keys; // the servers trust this user's key (trust_local_user)
  let client: MusterClient | undefined;
  try {
    await master_(master!.certname);
    client = await MusterClient.connect({ brokers: [broker.url] });
    const good = await mastersCheck(client, 2000);
    assert.equal(good.state, "ok", good.detail);
    await master_("puppet-eu.elsewhere.test");
    const bad = await mastersCheck(client, 2000);
    assert.equal(bad.state, "fail");
    assert.match(bad.detail, /puppet-eu\.elsewhere\.test: its CA's certificate does not carry its identity/);
    assert.doesNotMatch(bad.detail, new RegExp(`${master!.certname.replace(/\./g, "\\.")}:`), "the master with its own name is not named");
    assert.match(bad.fix!, /certname .*docs\/deploy\.md#4-puppet-masters/);
  } finally {
    await client?.close();
    process.env.MUSTER_CONFIG_DIR = before_;
    await Promise.all(servers.map((s) => s.stop()));
    await broker.dispose();
  }
});
