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
import { tempDir } from "../support/collective.js";

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
  master = await startPuppetserver({ host, readyTimeoutMs: 300_000 });
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
