// `npm run bench:lab`: the provisioner's own overhead against real Puppet, in a fresh attached lab.
//
//   node dist/bench/lab-overhead.js [--nodes 4]
//
// For every node provisioned: elapsed = finishedAt - startedAt (from its KV record); Puppet time =
// the steps that are Puppet's own work (request_csr: puppet ssl; sign_csr and clean_cert: the CA;
// bootstrap and production: puppet agent runs), as timed by the provisioner around each call.
// Overhead = elapsed - Puppet time: discovery, inventory, master choice, locks, KV writes, the
// notifier, RPC round trips. Reported as a share of Puppet time, and of the two agent runs alone.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { MusterClient } from "../src/client/client.js";
import { startLab } from "../src/lab/lab.js";
import { spawnMuster } from "../src/lab/processes.js";
import { type NodeRecord } from "../src/protocol/provision-record.js";
import { ProvisionState } from "../src/provisioner/state.js";

const { values: a } = parseArgs({ options: { nodes: { type: "string", default: "4" } } });
const N = Number(a.nodes);
const dir = mkdtempSync(join(tmpdir(), "muster-bench-lab-"));
process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
const lab = await startLab({ dir: join(dir, "lab"), nodes: N, detached: false, provisioner: false, progress: (l) => console.error(l) });
const client = await MusterClient.connect({ brokers: [lab.state.broker], collective: lab.state.collective, tls: lab.state.tls.admin });
const store = await ProvisionState.open(client, "muster_provision");
const prov = spawnMuster(["provisioner", "--config", lab.provisionerConfig(), "--foreground"], { logFile: join(dir, "provisioner.log"), env: lab.state.provisionerEnv });
try {
  const ids = lab.state.nodes.map((n) => n.identity);
  const latest = await store.waitFor(ids, (r) => r.status === "done" || r.status === "failed", 15 * 60_000);
  const recs = ids.map((id) => latest.get(id)).filter((r): r is NodeRecord => r?.status === "done");
  let elapsed = 0;
  let puppet = 0;
  let runs = 0;
  for (const r of recs) {
    const t = r.timings;
    elapsed += (r.finishedAt ?? 0) - (r.startedAt ?? 0);
    puppet += (t.request_csr ?? 0) + (t.sign_csr ?? 0) + (t.clean_cert ?? 0) + (t.bootstrap ?? 0) + (t.production ?? 0);
    runs += (t.bootstrap ?? 0) + (t.production ?? 0);
  }
  const overhead = elapsed - puppet;
  console.log(
    JSON.stringify(
      {
        nodes: N,
        provisioned: recs.length,
        mean_elapsed_s: +(elapsed / recs.length / 1000).toFixed(2),
        mean_puppet_s: +(puppet / recs.length / 1000).toFixed(2),
        mean_overhead_s: +(overhead / recs.length / 1000).toFixed(3),
        overhead_share_of_puppet_time: +(overhead / puppet).toFixed(4),
        overhead_share_of_agent_runs: +(overhead / runs).toFixed(4),
      },
      null,
      2,
    ),
  );
} finally {
  await prov.stop();
  await client.close();
  await lab.stop();
  rmSync(dir, { recursive: true, force: true });
}
