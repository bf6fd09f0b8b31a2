import { existsSync, mkdtempSync, renameSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NodeConnectionOptions } from "@nats-io/transport-node";
import type { NatsTls } from "../../src/lab/nats.js";
import { ensureCA, issueCert } from "../../src/security/pki.js";

// The suite runs with TLS on (every broker a test starts asks for a client certificate). One test PKI
// serves a run: scripts/run-tests.mjs makes it in a temp dir and names it in MUSTER_TEST_PKI; a test
// file run on its own (`node --test dist/test/x.test.js`) uses a cached one under the system temp
// dir. testPki() puts it in this process's environment as MUSTER_TLS_CA / _CERT / _KEY, which every
// MusterClient, muster command and daemon reads (src/broker/connect.ts resolveTls). This module has
// no side effects of its own; the other support modules call testPki() when they load.

export interface TestPki {
  dir: string;
  ca: string;
  /** nats-server's certificate: 127.0.0.1 and localhost, serverAuth. */
  serverCert: string;
  serverKey: string;
  /** The tests' client credential (clientAuth), what MUSTER_TLS_CERT/_KEY name. */
  clientCert: string;
  clientKey: string;
}

/** How brokers started by tests treat client certificates: required, so a test proves one is sent. */
export const TEST_TLS_CLIENTS: NatsTls["clients"] = "verify";

function files(dir: string): TestPki {
  return {
    dir,
    ca: join(dir, "ca.pem"),
    serverCert: join(dir, "server.pem"),
    serverKey: join(dir, "server.key"),
    clientCert: join(dir, "client.pem"),
    clientKey: join(dir, "client.key"),
  };
}

function complete(p: TestPki): boolean {
  return [p.ca, join(p.dir, "ca.key"), p.serverCert, p.serverKey, p.clientCert, p.clientKey].every((f) => existsSync(f));
}

/** The test CA, server and client certificates in `dir`; what exists already is kept (ensureCA/issueCert). */
export function createTestPki(dir: string): TestPki {
  const ca = ensureCA(dir, "/O=muster/CN=muster test CA");
  issueCert(ca, { name: "server", subject: "/O=muster/OU=test/CN=nats-server", dns: ["localhost"], ips: ["127.0.0.1"], usage: "server" });
  issueCert(ca, { name: "client", subject: "/O=muster/OU=test/CN=muster-test", usage: "client" });
  return files(dir);
}

/**
 * A PKI kept between standalone runs in <tmpdir>/muster-test-pki-<uid>. Built in a scratch dir and
 * renamed into place, so test files started together never see (or make) a half-written one.
 */
function cachedPki(): TestPki {
  const dir = join(tmpdir(), `muster-test-pki-${process.getuid?.() ?? "user"}`);
  for (let attempt = 0; ; attempt++) {
    if (existsSync(dir)) {
      const st = statSync(dir);
      if (process.getuid && st.uid !== process.getuid()) throw new Error(`${dir} belongs to uid ${st.uid}, not this user: remove it or set MUSTER_TEST_PKI`);
      const p = files(dir);
      if (complete(p)) return p;
      if (attempt > 0) throw new Error(`${dir} is incomplete; remove it`);
      rmSync(dir, { recursive: true, force: true }); // left half-made by a killed process
    }
    const scratch = mkdtempSync(`${dir}.tmp-`);
    try {
      createTestPki(scratch);
      renameSync(scratch, dir);
      return files(dir);
    } catch (e) {
      rmSync(scratch, { recursive: true, force: true });
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOTEMPTY" && code !== "EEXIST") throw e; // else another process got there first: use theirs
    }
  }
}

let current: TestPki | undefined;

/** The run's test PKI (MUSTER_TEST_PKI, else the cached one), exported to this process's environment. */
export function testPki(): TestPki {
  if (current) return current;
  const named = process.env.MUSTER_TEST_PKI;
  current = named ? createTestPki(named) : cachedPki();
  Object.assign(process.env, { MUSTER_TEST_PKI: current.dir }, testTlsEnv(current));
  return current;
}

/** MUSTER_TLS_* for a child process's environment. */
export function testTlsEnv(p: TestPki = testPki()): Record<"MUSTER_TLS_CA" | "MUSTER_TLS_CERT" | "MUSTER_TLS_KEY", string> {
  return { MUSTER_TLS_CA: p.ca, MUSTER_TLS_CERT: p.clientCert, MUSTER_TLS_KEY: p.clientKey };
}

/** `tls` for connect() from @nats-io/transport-node: trust the test CA, present the client certificate. */
export function testTlsOptions(): NonNullable<NodeConnectionOptions["tls"]> {
  const p = testPki();
  return { caFile: p.ca, certFile: p.clientCert, keyFile: p.clientKey };
}

/** `tls` for startNats() and nats.conf: the test server certificate, client certificates required. */
export function testNatsTls(clients: NatsTls["clients"] = TEST_TLS_CLIENTS): NatsTls {
  const p = testPki();
  return { cert: p.serverCert, key: p.serverKey, ca: p.ca, clients };
}
