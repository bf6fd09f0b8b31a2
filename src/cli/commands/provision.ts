import { Command } from "commander";
import { MusterError } from "../../errors.js";
import { DEFAULT_STATE_BUCKET } from "../../protocol/buckets.js";
import type { MusterClient } from "../../client/client.js";
import type { NodeRecord } from "../../protocol/provision-record.js";
import type { ProvisionState } from "../../provisioner/state.js";
import { addCommonOptions, type CommonOpts } from "../options.js";
import { bold, green, red, yellow } from "../style.js";

// Operator commands over the provisioner's KV records.

interface ProvisionOpts extends CommonOpts {
  bucket?: string;
}

async function openStore(o: ProvisionOpts): Promise<{ client: MusterClient; store: ProvisionState }> {
  // Loaded when a subcommand runs, not for --help (npm run bench:cli).
  const [{ MusterClient }, { ProvisionState }, { loadClientConfig, resolveBrokerSettings }] = await Promise.all([import("../../client/client.js"), import("../../provisioner/state.js"), import("../config.js")]);
  const cfg = loadClientConfig(o.config);
  const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
  const client = await MusterClient.connect({ brokers: broker.servers, collective: o.target ?? cfg.collective, name: "muster-provision", tls: broker.tls, from: broker.from });
  const bucket = o.bucket ?? (cfg.provision_bucket as string | undefined) ?? DEFAULT_STATE_BUCKET;
  return { client, store: await ProvisionState.open(client, bucket) };
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
            if (!v) throw new MusterError("MUSTER_UNKNOWN_NODE", `the provisioner has no record of ${identity}: check the spelling against \`muster provision status\``);
            process.stdout.write(o.json ? `${JSON.stringify(v.record, null, 2)}\n` : `${renderStatusTable([v.record])}\n\nLog:\n${v.record.log.map((l) => `  ${l}`).join("\n")}\n`);
            return;
          }
          const show = async () => {
            const recs = await store.list();
            if (o.json) process.stdout.write(`${JSON.stringify(recs, null, 2)}\n`);
            else if (o.watch && process.stdout.isTTY) process.stdout.write(`\x1b[2J\x1b[H${new Date().toISOString()}  (ctrl-c to stop)\n\n${renderStatusTable(recs)}\n`);
            else process.stdout.write(`${renderStatusTable(recs)}\n`);
          };
          await show();
          if (!o.watch) return;
          const w = await store.watch({ updatesOnly: true });
          const stop = new Promise<void>((r) => process.once("SIGINT", () => r()));
          let pending = false;
          void (async () => {
            for await (const c of w) {
              if (pending || c.type === "caught-up") continue;
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
      .argument("<identity...>", "node identities, as `muster provision status` lists them")
      .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
      .option("--force", "also start over a node that is done or pending (say, reinstalled): it is provisioned again once it waits in the provisioning collective")
      .addHelpText(
        "after",
        `
Only failed nodes are retried: a node the provisioner has no record of is refused (exit 1,
MUSTER_UNKNOWN_NODE), and so is one that is done, pending or being provisioned (exit 1,
MUSTER_RETRY_REFUSED) unless --force is given for done or pending. If any identity is refused,
no record is changed. See docs/provisioner.md#retrying.`,
      )
      .action(async (ids: string[], o: ProvisionOpts & { force?: boolean }) => {
        const { client, store } = await openStore(o);
        const { applyRetry, retryRefusal } = await import("../../fleet/provision-state.js");
        try {
          // Every identity is checked before any record changes: a typo among several names
          // must not leave the others half-done.
          const retry: NodeRecord[] = [];
          const unknown: string[] = [];
          const refused: string[] = [];
          for (const id of [...new Set(ids)]) {
            const rec = (await store.get(id))?.record;
            if (!rec) unknown.push(id);
            else {
              const why = retryRefusal(rec, o.force);
              if (why) refused.push(why);
              else retry.push(rec);
            }
          }
          if (unknown.length) {
            const also = refused.length ? `\n${refused.join("\n")}` : "";
            throw new MusterError("MUSTER_UNKNOWN_NODE", `the provisioner has no record of ${unknown.join(", ")}: check the spelling against \`muster provision status\` (a node gets a record when the provisioner first finds it waiting)${also}\nNothing was changed.`);
          }
          if (refused.length) throw new MusterError("MUSTER_RETRY_REFUSED", `${refused.join("\n")}\nNothing was changed.`);
          for (const rec of retry) {
            const was = rec.status;
            applyRetry(rec);
            await store.put(rec);
            process.stdout.write(was === "failed" ? `${rec.identity}: queued for provisioning\n` : `${rec.identity}: was ${was}; queued for provisioning once it waits in the provisioning collective\n`);
          }
        } finally {
          await client.close();
        }
      }),
  );
  return cmd;
}
