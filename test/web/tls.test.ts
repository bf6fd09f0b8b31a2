import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:https";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "../../src/log.js";
import { ensureCA, issueCert } from "../../src/security/pki.js";
import { startWeb, type WebHandle } from "../../src/web/daemon.js";
import { WebConfigSchema } from "../../src/web/config.js";
import { freePort } from "../support/index.js";
import { testPki } from "../support/tls.js";

// The console over HTTPS with client certificates instead of tokens: the role comes from the
// certificate's common name (tls.roles); a certificate the CA did not sign never gets a TLS session,
// and a signed one whose name has no role is 401.

let dir: string;
let web: WebHandle;
let port: number;
const pki = testPki();

interface Answer {
  status: number;
  body: string;
}

function get(path: string, cred?: { cert: string; key: string }, method = "GET", headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path, method, agent: false, ca: readFileSync(pki.ca), servername: "localhost", headers, ...(cred ? { cert: readFileSync(cred.cert), key: readFileSync(cred.key) } : {}) },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

let operator: { cert: string; key: string };
let stranger: { cert: string; key: string };
let foreign: { cert: string; key: string };

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-web-tls-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  // Client certificates from the run's test CA; one from a CA the console does not know.
  const ca = ensureCA(join(dir, "ca"));
  operator = issueCert(ca, { name: "alice", subject: "/O=muster/OU=people/CN=alice", usage: "client" });
  stranger = issueCert(ca, { name: "mallory", subject: "/O=muster/OU=people/CN=mallory", usage: "client" });
  const other = ensureCA(join(dir, "other-ca"));
  foreign = issueCert(other, { name: "alice", subject: "/O=muster/OU=people/CN=alice", usage: "client" });
  port = await freePort();
  const cfg = WebConfigSchema.parse({ listen: `127.0.0.1:${port}`, tls: { cert: pki.serverCert, key: pki.serverKey, ca: ca.cert, roles: { alice: "operator" } }, registry: { url: `http://127.0.0.1:${await freePort()}` } });
  // No broker runs: the console starts anyway and says so on /api/status.
  web = await startWeb(cfg, silentLogger, { broker: `nats://127.0.0.1:${await freePort()}`, probeMs: 300 });
});

after(async () => {
  await web?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("a client certificate the CA signed and tls.roles names is that role; the session says so", async () => {
  const r = await get("/api/session", operator);
  assert.equal(r.status, 200, r.body);
  const s = JSON.parse(r.body) as { name: string; role: string; via: string; csrf: string };
  assert.deepEqual([s.name, s.role, s.via], ["alice", "operator", "certificate"]);
  assert.ok(s.csrf.length > 10);
  const health = JSON.parse((await get("/api/status", operator)).body) as { broker: { ok: boolean; error?: string } };
  assert.equal(health.broker.ok, false, "no broker runs in this test");
});

test("a signed certificate whose name has no role gets 401; so does a request without a certificate's role", async () => {
  const r = await get("/api/session", stranger);
  assert.equal(r.status, 401, r.body);
  assert.equal((JSON.parse(r.body) as { error: { code: string } }).error.code, "unauthenticated");
});

test("no client certificate, or one from another CA: no TLS session at all", async () => {
  await assert.rejects(get("/api/session"), /socket hang up|ECONNRESET|certificate|alert/i);
  await assert.rejects(get("/api/session", foreign), /socket hang up|ECONNRESET|certificate|alert|unknown ca/i);
});

test("a certificate operator's actions still need the CSRF header", async () => {
  const r = await get("/api/board/web1.test/retry", operator, "POST", { "content-type": "application/json" }, "{}");
  assert.equal(r.status, 403, r.body);
  assert.equal((JSON.parse(r.body) as { error: { code: string } }).error.code, "csrf");
});
