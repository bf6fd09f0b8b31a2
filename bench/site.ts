// `npm run bench:site`: the site as machines (docs/lab.md, The site), against today's lab in the same run.
//
//   node dist/bench/site.js [--cold] [--no-lab] [--out bench/results/site.json]
//
// Brings the site up with 4 nodes (`muster lab up --site`): --cold first into an empty image cache
// (the Debian 13 image built, then the site), then warm (the image cached). For each: the time to
// every node waiting and to the site being up (masters in the fleet, registry and console
// answering), the time from the masters being trusted (the provisioners can act) to all 4 nodes
// provisioned, each node's own provisioning time, and, once all are provisioned, the RSS of every
// machine as the host sees it and of each daemon in it (muster's, nats-server, puppetserver).
// Then, unless --no-lab, today's lab of 4 machines (bench/machines.ts's run) for the provisioning
// time against it. Runs under the heavy-work lock when called through npm: nothing else may run.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { machineLeader } from "../src/lab/machines/index.js";
import { startSite, type Site } from "../src/lab/site/index.js";
import { labMachinesOf } from "../src/lab/state.js";
import type { NodeRecord } from "../src/protocol/provision-record.js";
import { ProvisionState } from "../src/provisioner/state.js";
import { imageCache, machineRss, runLab, say } from "./machine-runs.js";

const { values: a } = parseArgs({ options: { cold: { type: "boolean", default: false }, "no-lab": { type: "boolean", default: false }, out: { type: "string" } } });
const NODES = 4;
const s = (ms: number) => +(ms / 1000).toFixed(1);

interface SiteRunResult {
  image: "cold" | "warm";
  start_to_nodes_waiting_s?: number;
  start_to_site_up_s: number;
  masters_trusted_s?: number;
  trusted_to_all_provisioned_s: number;
  provisioned: number;
  per_node_provisioning_s: Record<string, number>;
  rss: Record<string, { role: string; [k: string]: number | string }>;
  stop_s: number;
}

async function runSite(image: "cold" | "warm", cache: string): Promise<SiteRunResult> {
  const dir = mkdtempSync(join(tmpdir(), `muster-bench-site-${image}-`));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  const t0 = Date.now();
  const marks: Record<string, number> = {};
  let site: Site | undefined;
  try {
    site = await startSite({
      dir: join(dir, "lab"),
      nodes: NODES,
      detached: false,
      imageCache: cache,
      progress: (line) => {
        say(line);
        if (/the brokers trust the masters/.test(line)) marks.trusted ??= Date.now();
        if (/waiting to be provisioned/.test(line)) marks.waiting = Date.now();
      },
    });
    const up = Date.now();
    const client = await site.client("bench-site");
    try {
      const store = await ProvisionState.open(client, "muster_provision");
      const ids = site.state.nodes.map((n) => n.identity);
      const latest = await store.waitFor(ids, (r) => r.status === "done" || r.status === "failed", 20 * 60_000);
      const done = Math.max(...[...latest.values()].map((r) => r.finishedAt ?? Date.now()));
      const rss: SiteRunResult["rss"] = {};
      for (const m of labMachinesOf(site.state)) {
        const leader = machineLeader(m.machine.dir);
        if (leader) rss[m.identity] = { role: m.role, ...machineRss(leader, "nspawn") };
      }
      const per: Record<string, number> = {};
      for (const [id, r] of latest) per[id] = s((r.finishedAt ?? done) - ((r as NodeRecord).startedAt ?? done));
      const result = {
        image,
        ...(marks.waiting ? { start_to_nodes_waiting_s: s(marks.waiting - t0) } : {}),
        start_to_site_up_s: s(up - t0),
        ...(marks.trusted ? { masters_trusted_s: s(marks.trusted - t0) } : {}),
        trusted_to_all_provisioned_s: s(done - (marks.trusted ?? up)),
        provisioned: [...latest.values()].filter((r) => r.status === "done").length,
        per_node_provisioning_s: per,
        rss,
      };
      const d0 = Date.now();
      await client.close();
      await site.stop();
      site = undefined;
      return { ...result, stop_s: s(Date.now() - d0) };
    } finally {
      await client.close().catch(() => undefined);
    }
  } finally {
    await site?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const results: Record<string, unknown> = { at: new Date().toISOString(), host: { cores: (await import("node:os")).cpus().length }, nodes: NODES };
const runs: SiteRunResult[] = [];
if (a.cold) {
  const cold = mkdtempSync(join(tmpdir(), "muster-bench-site-image-"));
  try {
    runs.push(await runSite("cold", cold));
  } finally {
    rmSync(cold, { recursive: true, force: true });
  }
}
runs.push(await runSite("warm", imageCache));
results.site = runs;
if (!a["no-lab"]) {
  const lab = await runLab("nspawn", NODES);
  results.lab = lab;
  const warm = runs.at(-1)!;
  results.provisioning_site_vs_lab = +(warm.trusted_to_all_provisioned_s / lab.provisioner_to_all_done_s).toFixed(2);
}
const text = JSON.stringify(results, null, 2);
console.log(text);
if (a.out) {
  mkdirSync(join(a.out, ".."), { recursive: true });
  writeFileSync(a.out, `${text}\n`);
}
