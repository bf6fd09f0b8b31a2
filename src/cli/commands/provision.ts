import { Command } from "commander";
import { KvWatchInclude } from "@nats-io/kv";
import { MusterClient } from "../../client/client.js";
import { resolveBrokers } from "../../broker/connect.js";
import { MusterError } from "../../errors.js";
import { StateStore, newRecord, appendLog, type NodeRecord } from "../../provisioner/state.js";
import { DEFAULT_STATE_BUCKET } from "../../provisioner/config.js";
import { loadClientConfig } from "../config.js";
import { addCommonOptions, type CommonOpts } from "../options.js";
import { bold, green, red, yellow } from "../output.js";

// Operator commands over the provisioner's KV records.

interface ProvisionOpts extends CommonOpts {
  bucket?: string;
}

async function openStore(o: ProvisionOpts): Promise<{ client: MusterClient; store: StateStore }> {
  const cfg = loadClientConfig(o.config);
  const client = await MusterClient.connect({ brokers: resolveBrokers(o.broker, cfg.brokers), collective: o.target ?? cfg.collective, name: "muster-provision", tls: cfg.tls });
  const bucket = o.bucket ?? (cfg.provision_bucket as string | undefined) ?? DEFAULT_STATE_BUCKET;
  return { client, store: await StateStore.open(client.nc, bucket) };
}

const elapsed = (r: NodeRecord, now: number) => {
  if (!r.startedAt) return "";
  const s = ((r.finishedAt ?? now) - r.startedAt) / 1000;
  return s < 120 ? `${s.toFixed(1)}s` : `${Math.floor(s / 60)}m${Math.round(s % 60)}s`;
};

export function renderStatusTable(records: NodeRecord[], now = Date.now()): string {
  const rows = records.map((r) => [r.identity, r.status, r.status === "in_progress" ? (r.current ?? r.stage ?? "") : (r.stage ?? ""), r.master ?? "", elapsed(r, now), String(r.attempts || ""), (r.lastError ?? "").replace(/\s+/g, " ").slice(0, 80)]);
  const head = ["NODE", "STATUS", "STAGE", "MASTER", "ELAPSED", "TRIES", "LAST ERROR"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const color = (status: string, s: string) => (status === "done" ? green(s) : status === "failed" ? red(s) : status === "in_progress" ? yellow(s) : s);
  const lines = [bold(head.map((h, i) => h.padEnd(widths[i]!)).join("  "))];
  for (const r of rows) lines.push(r.map((c, i) => (i === 1 ? color(c, c.padEnd(widths[i]!)) : c.padEnd(widths[i]!))).join("  ").trimEnd());
  const count = (s: string) => records.filter((r) => r.status === s).length;
  lines.push("", `${records.length} nodes: ${count("done")} done, ${count("in_progress")} in progress, ${count("pending")} pending, ${count("failed")} failed`);
  return lines.join("\n");
}

export function provisionCommand(): Command {
  const cmd = new Command("provision").description("Inspect and steer provisioning: status, retry");
  cmd.addCommand(
    addCommonOptions(new Command("status"))
      .description("Every node the provisioner knows: stage, master, elapsed time, last error")
      .option("--watch", "keep the table live until interrupted")
      .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
      .argument("[identity]", "show one node with its log tail")
      .action(async (identity: string | undefined, o: ProvisionOpts & { watch?: boolean }) => {
        const { client, store } = await openStore(o);
        try {
          if (identity) {
            const v = await store.get(identity);
            if (!v) throw new MusterError("MUSTER_USAGE", `the provisioner has no record of ${identity}`);
            process.stdout.write(o.json ? `${JSON.stringify(v.record, null, 2)}\n` : `${renderStatusTable([v.record])}\n\nLog:\n${v.record.log.map((l) => `  ${l}`).join("\n")}\n`);
            return;
          }
          const show = async () => {
            const recs = await store.all();
            if (o.json) process.stdout.write(`${JSON.stringify(recs, null, 2)}\n`);
            else if (o.watch && process.stdout.isTTY) process.stdout.write(`\x1b[2J\x1b[H${new Date().toISOString()}  (ctrl-c to stop)\n\n${renderStatusTable(recs)}\n`);
            else process.stdout.write(`${renderStatusTable(recs)}\n`);
          };
          await show();
          if (!o.watch) return;
          const w = await store.kv.watch({ include: KvWatchInclude.UpdatesOnly });
          const stop = new Promise<void>((r) => process.once("SIGINT", () => r()));
          let pending = false;
          void (async () => {
            for await (const _ of w) {
              if (pending) continue;
              pending = true;
              setTimeout(() => void show().finally(() => (pending = false)), 200); // coalesce bursts of updates into one redraw
            }
          })();
          await stop;
          w.stop();
        } finally {
          await client.close();
        }
      }),
  );
  cmd.addCommand(
    addCommonOptions(new Command("retry"))
      .description("Provision a failed node again from the start (the provisioner picks it up next cycle)")
      .argument("<identity...>", "node identities")
      .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
      .action(async (ids: string[], o: ProvisionOpts) => {
        const { client, store } = await openStore(o);
        try {
          for (const id of ids) {
            const v = await store.get(id);
            const rec = v?.record ?? newRecord(id);
            if (rec.status === "in_progress") throw new MusterError("MUSTER_USAGE", `${id} is being provisioned right now (by ${rec.owner}); retry applies to failed nodes`);
            rec.status = "pending";
            rec.stage = undefined;
            rec.current = undefined;
            rec.attempts = 0;
            rec.lastError = undefined;
            rec.hadCert = undefined;
            appendLog(rec, "retry requested by operator");
            await store.put(rec);
            process.stdout.write(`${id}: queued for provisioning\n`);
          }
        } finally {
          await client.close();
        }
      }),
  );
  return cmd;
}
