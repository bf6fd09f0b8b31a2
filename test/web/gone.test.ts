import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { launchChromium } from "../support/browser.js";
import { spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { freePort } from "../support/index.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";
import { startLabBroker, type LabBroker } from "./lab-broker.js";

// The real provisioner, the real console and chromium, against emulated nodes whose CA and Puppet
// are simulated (src/emulator/simulated.ts; the lab's machine test does it with real ones): a node
// removed while the provisioner works on it shows as gone on the board. The provisioner's dead-node
// detection sets `gone` on its record (docs/provisioner.md, Machines that die), and the board shows
// it. The deadline only catches a hang; how long detection takes is printed, and measured against
// machines in bench/machines.ts.

test(
  "provisioner, console and browser against emulated nodes (simulated CA and Puppet): a node removed mid-step shows as gone on the board",
  { timeout: 360_000 },
  async () => {
    const tmp = tempDir("web-gone");
    const configDir = join(tmp.path, "config");
    process.env.MUSTER_CONFIG_DIR = configDir;
    const VANISH = "vanish.test";
    const support: FleetNode[] = [
      { identity: "master-de.test", facts: { ipaddress: "127.3.2.1", country: "de" }, classes: ["puppet_server"], agents: ["puppetca"] },
      { identity: "notifier.test", facts: { country: "de" }, classes: [], agents: ["notify"] },
    ];
    const node: FleetNode = { identity: VANISH, facts: { ipaddress: "127.2.2.1", country: "de" }, classes: ["base"], agents: ["provision"] };
    let lab: LabBroker | undefined;
    let supportEmu: RunningEmulator | undefined;
    let nodeEmu: RunningEmulator | undefined;
    let web: MusterProcess | undefined;
    let provisioner: MusterProcess | undefined;
    const browser = await launchChromium();
    try {
      lab = await startLabBroker({ dir: tmp.path, nodes: [...support, node].map((n) => n.identity) });
      const ca = new SimulatedCA();
      // The bootstrap run takes ten minutes: the node is mid-step when it goes.
      supportEmu = await startEmulator({ nc: await lab.connect("emulator", "support"), nodes: support, collective: "muster", log: silentLogger, registration: { interval: 1, splay: false }, factories: simulatedFactories(ca, { puppetRunMs: [600_000, 600_000], csrMs: 5 }) });
      nodeEmu = await startEmulator({ nc: await lab.connect("emulator", "vanishing"), nodes: [node], collective: "muster", log: silentLogger, registration: { interval: 1, splay: false }, factories: simulatedFactories(ca, { puppetRunMs: [600_000, 600_000], csrMs: 5 }) });
      writeFileSync(join(tmp.path, "tokens"), "op-5e2a7c9b1d3f4a60 operator alice\n", { mode: 0o600 });
      writeFileSync(join(tmp.path, "web.yaml"), toYaml({ listen: "127.0.0.1:0", auth: { tokens_file: join(tmp.path, "tokens") }, registry: { url: `http://127.0.0.1:${await freePort()}` } }));
      web = spawnMuster(["web", "--config", join(tmp.path, "web.yaml"), "--broker", lab.url], { env: lab.env("admin", configDir) });
      const url = /(https?:\/\/[0-9.]+:\d+)/.exec(await web.waitForLine(/ready/, 20_000))![1]!;
      provisioner = spawnMuster(["provisioner", "--config", writeSimulatedProvisionerConfig(tmp.path, "prov", { broker: lab.url, concurrency: 2 }), "--foreground"], { env: lab.env("provisioner", configDir) });
      const page = await (await browser.newContext()).newPage();
      await page.goto(`${url}/#/board`); // the board, not the landing page (health)
      await page.fill("input[name=token]", "op-5e2a7c9b1d3f4a60");
      await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
      const row = `.board-table .row[data-identity="${VANISH}"]`;
      await page.waitForSelector(`${row}[data-status="in_progress"]`, { timeout: 60_000 });
      await nodeEmu.stop(); // the node is gone: no more answers, no shutdown event
      nodeEmu = undefined;
      const t0 = Date.now();
      await page.waitForSelector(`${row}[data-gone="true"]`, { timeout: 180_000 });
      process.stdout.write(`# node removed -> gone on the board: ${Date.now() - t0} ms\n`);
      assert.match((await page.locator(`.attention[data-identity="${VANISH}"]`).textContent()) ?? "", /gone/);
    } finally {
      await browser.close().catch(() => undefined);
      await provisioner?.stop();
      await web?.stop();
      await nodeEmu?.stop();
      await supportEmu?.stop();
      await lab?.stop();
      tmp.remove();
    }
  },
);
