import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";

/**
 * Writes `<dir>/<name>.yaml`: a provisioner config with every step on, for the emulated fleets
 * with simulated agents (masters chosen by country, a notifier with a dummy target), logging to
 * `<dir>/<name>.log`. `settings` adds or overrides keys (broker, concurrency, leases ...).
 */
export function writeSimulatedProvisionerConfig(dir: string, name: string, settings: Record<string, unknown>): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    toYaml({
      logfile: join(dir, `${name}.log`),
      loglevel: "debug",
      sleeptime: 1,
      steps: { lock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, notify: true },
      master: { criteria: ["country"], agent: "puppetca" },
      notify: { agent: "notify", targets: ["http://127.0.0.1:9/"] },
      id: name,
      ...settings,
    }),
  );
  return file;
}
