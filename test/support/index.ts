import { startNats as startLabNats, type NatsHandle, type NatsTls, type StartNatsOptions } from "../../src/lab/nats.js";
import { testNatsTls, testPki } from "./tls.js";

// Process starters live in src/lab (the lab uses them too); tests import them from here, where the
// broker gets TLS from the test PKI (./tls.ts).
export { waitForPort, type NatsHandle, type NatsTls } from "../../src/lab/nats.js";
export { freePort } from "../../src/lab/ports.js";
export { testNatsTls, testPki, testTlsEnv, testTlsOptions, type TestPki } from "./tls.js";

testPki(); // MUSTER_TLS_* in this process's environment before any test builds a client or a child env

export interface TestNatsOptions extends Omit<StartNatsOptions, "tls"> {
  /** TLS on the client port: the test PKI with client certificates required unless given; false for plain TCP. */
  tls?: NatsTls | false;
}

/** src/lab's startNats with TLS on (the test server certificate, client certificates required). */
export function startNats(opts: TestNatsOptions = {}): Promise<NatsHandle> {
  const { tls, ...rest } = opts;
  return startLabNats({ ...rest, ...(tls === false ? {} : { tls: tls ?? testNatsTls() }) });
}
