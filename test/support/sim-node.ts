// A child process hosting one emulated waiting node whose provision agent simulates Puppet
// (src/emulator/simulated.ts), for tests that kill a node: SIGKILL is a machine dying, SIGTERM a
// clean stop (its shutdown event goes out). Its CSRs go to the test's simulated CA over NATS
// (`test.csr.<identity>`, {fingerprint, nodeKey}), as Puppet submits a CSR over the network. It
// signs with the key in KEYFILE, so a restart is the same node. Prints "ready" once it serves.
//
// With LEAVE, the node stops (its shutdown event goes out, its in-flight replies still do) and exits
// right after its provisioning is disabled, as a real node leaves the provisioning collective then.
//
//   node dist/test/support/sim-node.js URL IDENTITY CSR_MS KEYFILE [LEAVE]
import { readFileSync } from "node:fs";
import { startEmulator } from "../../src/emulator/emulator.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { signingKeyFromPem } from "../../src/protocol/signing.js";
import { connectNats } from "./collective.js";

const [url, identity, csrMs, keyFile, leave] = process.argv.slice(2);
const key = signingKeyFromPem(identity!, readFileSync(keyFile!, "utf8"));
const nc = await connectNats(url!);
const enc = new TextEncoder();
const factories = simulatedFactories(new SimulatedCA(), {
  puppetRunMs: [20, 60],
  csrMs: Number(csrMs),
  submitCsr: async (id, fingerprint, nodeKey) => {
    nc.publish(`test.csr.${id}`, enc.encode(JSON.stringify({ fingerprint, nodeKey })));
    await nc.flush();
  },
  ...(leave ? { onDisabled: () => stop() } : {}),
});
const stop = () =>
  void emu
    .stop()
    .then(() => nc.drain())
    .finally(() => process.exit(0));
const emu = await startEmulator({ nc, nodes: [{ identity: identity!, facts: { ipaddress: "127.4.0.1", country: "de" }, classes: [], agents: ["provision"] }], collective: "muster", log: silentLogger, nodeKey: () => key, factories });
process.stdout.write("ready\n");
process.once("SIGTERM", stop);
