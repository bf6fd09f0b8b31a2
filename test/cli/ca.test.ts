import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { cleanEnv, runCli, tempDir } from "../support/collective.js";

// `muster ca`: the site's CA and the certificates docs/deploy.md#2-credentials makes with it, each
// X.509 v3 with what TLS stacks check, its subject the broker user the guide lists, read back with
// openssl (as a broker or a client reads them).

const tmp = tempDir("ca-cli");
const env = cleanEnv(join(tmp.path, "cfg"));
const ca = join(tmp.path, "ca");
const out = join(tmp.path, "creds");
after(() => tmp.remove());

const text = (pem: string) => execFileSync("openssl", ["x509", "-in", pem, "-noout", "-text"], { encoding: "utf8" });
const verify = (pem: string) => execFileSync("openssl", ["verify", "-CAfile", join(ca, "ca.pem"), pem], { encoding: "utf8" }).trim();

test("create makes a v3 CA (0600 key) once, and keeps it", async () => {
  const r = await runCli(["ca", "create", "--dir", ca, "--org", "example"], { env });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(statSync(join(ca, "ca.key")).mode & 0o777, 0o600);
  const t = text(join(ca, "ca.pem"));
  assert.match(t, /Version: 3/);
  assert.match(t, /Basic Constraints: critical\s+CA:TRUE/);
  assert.match(t, /Key Usage: critical\s+Certificate Sign, CRL Sign/);
  assert.equal(new X509Certificate(readFileSync(join(ca, "ca.pem"))).subject, "O=example\nCN=example muster CA");
  const before = readFileSync(join(ca, "ca.pem"), "utf8");
  const again = await runCli(["ca", "create", "--dir", ca], { env });
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /^kept the CA there/);
  assert.equal(readFileSync(join(ca, "ca.pem"), "utf8"), before, "never replaced");
});

test("issue: a broker's (both uses, names in subjectAltName), a service's and a node's (client), the console's HTTPS (server); subjects are the guide's broker users", async () => {
  const issue = (...args: string[]) => runCli(["ca", "issue", ...args, "--ca-dir", ca, "--out", out], { env });
  const broker = await issue("broker", "nats1.example.net", "--ip", "192.0.2.1", "--dns", "nats1");
  assert.equal(broker.code, 0, broker.stderr);
  assert.match(broker.stdout, /CN=nats1\.example\.net,OU=broker,O=example, names nats1\.example\.net, nats1, 192\.0\.2\.1/);
  const b = text(join(out, "nats1.example.net.pem"));
  assert.match(b, /Version: 3/);
  assert.match(b, /Basic Constraints: critical\s+CA:FALSE/);
  assert.match(b, /Key Usage: critical\s+Digital Signature, Key Encipherment/);
  assert.match(b, /Extended Key Usage: \s*TLS Web Server Authentication, TLS Web Client Authentication/);
  assert.match(b, /Subject Alternative Name: \s*DNS:nats1\.example\.net, DNS:nats1, IP Address:192\.0\.2\.1/);
  assert.match(b, /Subject Key Identifier/);
  assert.match(b, /Authority Key Identifier/);
  assert.equal(statSync(join(out, "nats1.example.net.key")).mode & 0o777, 0o600);

  const svc = await issue("service", "provisioner");
  assert.match(svc.stdout, /CN=provisioner,OU=service,O=example/);
  const s = text(join(out, "provisioner.pem"));
  assert.match(s, /Extended Key Usage: \s*TLS Web Client Authentication\n/);
  assert.doesNotMatch(s, /Subject Alternative Name/, "a service names no host");
  assert.match((await issue("node", "puppet-eu.example.net")).stdout, /CN=puppet-eu\.example\.net,OU=node,O=example/);
  const https = await runCli(["ca", "issue", "https", "console.example.net", "--ca-dir", ca, "--out", join(out, "https")], { env });
  assert.equal(https.code, 0, https.stderr);
  assert.match(text(join(out, "https", "console.example.net.pem")), /Extended Key Usage: \s*TLS Web Server Authentication\n/);
  for (const f of ["nats1.example.net.pem", "provisioner.pem", "puppet-eu.example.net.pem", join("https", "console.example.net.pem")]) assert.match(verify(join(out, f)), /: OK$/);
});

test("issue refuses what it cannot make, and writes nothing", async () => {
  const cases: [string[], RegExp][] = [
    [["ca", "issue", "server", "x", "--ca-dir", ca, "--out", out], /the kind is one of service, node, broker, https/],
    [["ca", "issue", "service", "ops", "--dns", "ops.example.net", "--ca-dir", ca, "--out", out], /--dns and --ip name a host/],
    [["ca", "issue", "broker", "nats9", "--ip", "not-an-ip", "--ca-dir", ca, "--out", out], /--ip "not-an-ip" is not an address/],
    [["ca", "issue", "service", "../x", "--ca-dir", ca, "--out", out], /letters, digits/],
    [["ca", "issue", "service", "ops", "--ca-dir", join(tmp.path, "nope"), "--out", out], /no CA in .*nope .*muster ca create/],
    [["ca", "create", "--dir", join(tmp.path, "ca2"), "--org", "a/b"], /--org "a\/b"/],
  ];
  for (const [args, why] of cases) {
    const r = await runCli(args, { env });
    assert.notEqual(r.code, 0, args.join(" "));
    assert.match(r.stderr, why, args.join(" "));
  }
  assert.ok(!existsSync(join(out, "x.pem")) && !existsSync(join(out, "ops.pem")) && !existsSync(join(out, "nats9.pem")) && !existsSync(join(tmp.path, "ca2", "ca.pem")));
});
