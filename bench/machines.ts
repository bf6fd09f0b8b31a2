// `npm run bench:machines`: what a lab machine costs, against process nodes in the same run.
//
//   node dist/bench/machines.js [--machines 4,8] [--vm] [--cold-image] [--detection] [--out bench/results/machines.json]
//
// For each N: a lab of N process nodes (the floor: the same provisioning, no machine under it), then
// a lab of N systemd-nspawn machines; with --vm, one lab of one QEMU machine. For each lab: the time
// from the start to every node waiting, and from the provisioner's start to every node provisioned;
// for each machine: power-on to waiting (booted, cloud-init installed the package, muster-server up)
// and power-on to provisioned; its RSS as the host sees it (every process in its PID namespace, or
// qemu's) and muster-server's inside it. --cold-image builds the image into an empty cache first,
// for the image's build time and size (otherwise they come from the cache's build.json).
// --detection: on the first lab of machines, once provisioned, how long the fleet takes to see one
// die (bench/detection.ts): a power cut to unreachable in `muster health`, the console and the
// admins' alert, and back; a power cut during a bootstrap Puppet run to marked gone.
// Runs under the heavy-work lock when called through npm: nothing else may run meanwhile.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ensureImage, hostRelease, imageInfo, machineImageSpec } from "../src/lab/machines/index.js";
import { imageCache, runLab, say, type LabRun } from "./machine-runs.js";

const { values: a } = parseArgs({ options: { machines: { type: "string", default: "4,8" }, vm: { type: "boolean", default: false }, "cold-image": { type: "boolean", default: false }, detection: { type: "boolean", default: false }, out: { type: "string" } } });
const sizes = a.machines.split(",").map(Number);

const results: Record<string, unknown> = { at: new Date().toISOString(), host: { cores: (await import("node:os")).cpus().length } };
if (a["cold-image"]) {
  const cold = mkdtempSync(join(tmpdir(), "muster-bench-image-"));
  try {
    const img = await ensureImage(cold, machineImageSpec(hostRelease()), say);
    results.image = { cold_build_s: img.buildSeconds, mb: +(img.bytes / 1e6).toFixed(0) };
  } finally {
    rmSync(cold, { recursive: true, force: true });
  }
}
const spec = machineImageSpec(hostRelease());
const img = await ensureImage(imageCache, spec, say);
const info = imageInfo(img.root);
results.image ??= { key: img.key, build_s: info?.buildSeconds, mb: +((info?.bytes ?? img.bytes) / 1e6).toFixed(0) };
const runs: LabRun[] = [];
for (const n of sizes) {
  runs.push(await runLab("process", n));
  runs.push(await runLab("nspawn", n, { detection: a.detection && n === sizes[0] }));
  const [floor, m] = runs.slice(-2) as [LabRun, LabRun];
  say(`${n} machines: provisioned in ${m.provisioner_to_all_done_s} s against ${floor.provisioner_to_all_done_s} s for ${n} process nodes (${(m.provisioner_to_all_done_s / floor.provisioner_to_all_done_s).toFixed(2)}x)`);
}
if (a.vm) runs.push(await runLab("vm", 1));
results.runs = runs;
results.ratios = sizes.map((n) => {
  const floor = runs.find((r) => r.kind === "process" && r.nodes === n)!;
  const m = runs.find((r) => r.kind === "nspawn" && r.nodes === n)!;
  return { nodes: n, provisioning_vs_process_nodes: +(m.provisioner_to_all_done_s / floor.provisioner_to_all_done_s).toFixed(2), lab_start_vs_process_nodes: +(m.start_to_all_waiting_s / floor.start_to_all_waiting_s).toFixed(2) };
});
const text = JSON.stringify(results, null, 2);
console.log(text);
if (a.out) {
  mkdirSync(join(a.out, ".."), { recursive: true });
  writeFileSync(a.out, `${text}\n`);
}
