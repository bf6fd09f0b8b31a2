import { Command } from "commander";
import { MusterError } from "../../errors.js";
import { DEFAULT_STATE_BUCKET } from "../../protocol/buckets.js";
import type { MusterClient } from "../../client/client.js";
import type { NodeRecord } from "../../protocol/provision-record.js";
import type { ProvisionState } from "../../provisioner/state.js";
import type { FailureGroup } from "../../fleet/provision-failures.js";
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
  // a node gone while being provisioned reads "gone" (since when and why instead of the last error)
  const gone = (r: NodeRecord) => r.status === "in_progress" && r.gone !== undefined;
  // a node waiting for a Puppet master reads "waiting" (why, and for how long)
  const waiting = (r: NodeRecord) => r.status === "in_progress" && r.masterWait !== undefined && !gone(r);
  const ago = (since: number) => `${Math.max(0, Math.round((now - since) / 1000))}s`;
  const why = (r: NodeRecord) => (gone(r) ? `gone ${ago(r.gone!.since)} ago: ${r.gone!.reason}` : waiting(r) ? `${r.masterWait!.reason} (${ago(r.masterWait!.since)})` : (r.lastError ?? ""));
  const rows = records.map((r) => [r.identity, gone(r) ? "gone" : waiting(r) ? "waiting" : r.status, r.status === "in_progress" ? (r.current ?? r.stage ?? "") : (r.stage ?? ""), r.master ?? "", elapsed(r, now), String(r.attempts || ""), why(r).replace(/\s+/g, " ").slice(0, 80)]);
  const head = ["NODE", "STATUS", "STAGE", "MASTER", "ELAPSED", "TRIES", "LAST ERROR"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const color = (status: string, s: string) => (status === "done" ? green(s) : status === "failed" || status === "gone" ? red(s) : status === "in_progress" || status === "waiting" ? yellow(s) : s);
  const lines = [bold(head.map((h, i) => h.padEnd(widths[i]!)).join("  "))];
  for (const r of rows) lines.push(r.map((c, i) => (i === 1 ? color(c, c.padEnd(widths[i]!)) : c.padEnd(widths[i]!))).join("  ").trimEnd());
  const count = (s: string) => records.filter((r) => r.status === s).length;
  const goneCount = records.filter(gone).length;
  const waitingCount = records.filter(waiting).length;
  const within = [goneCount ? `${goneCount} gone` : "", waitingCount ? `${waitingCount} waiting for a master` : ""].filter(Boolean).join(", ");
  lines.push("", `${records.length} nodes: ${count("done")} done, ${count("in_progress")} in progress${within ? ` (${within})` : ""}, ${count("pending")} pending, ${count("failed")} failed`);
  return lines.join("\n");
}

/** `provision status --failed --group`: one block per cause, largest first, with its id for `retry --group`. */
export function renderFailureGroups(groups: FailureGroup[]): string {
  if (groups.length === 0) return "no failed nodes";
  const lines: string[] = [];
  for (const g of groups) {
    const masters = g.masters.map((m) => `${m.master || "(no master)"} ${m.count}`).join(", ");
    lines.push(`${bold(g.id)}  ${red(`${g.count} failed`)} at ${g.stage || "(no stage)"}  masters: ${masters}`);
    lines.push(`  reason:  ${g.reason}`);
    lines.push(`  example: ${g.example.identity}: ${g.example.last_error.replace(/\s+/g, " ").slice(0, 200)}`);
    const shown = g.nodes.slice(0, 10);
    lines.push(`  nodes:   ${shown.join(" ")}${g.nodes.length > shown.length ? ` ... and ${g.nodes.length - shown.length} more` : ""}`);
    lines.push("");
  }
  const total = groups.reduce((n, g) => n + g.count, 0);
  lines.push(`${total} failed ${total === 1 ? "node" : "nodes"} in ${groups.length} ${groups.length === 1 ? "group" : "groups"}; retry a group with: muster provision retry --group ID [--master NAME]`);
  return lines.join("\n");
}

export function provisionCommand(): Command {
  const cmd = new Command("provision").description("Inspect and steer provisioning: status, retry");
  cmd.addCommand(
    addCommonOptions(new Command("status"))
      .description("Every node the provisioner knows: stage, master, elapsed time, last error")
      .option("--watch", "keep the table live until interrupted")
      .option("--failed", "only failed nodes")
      .option("--group", "with --failed: group failed nodes by cause (the stage they failed at and their error with names, numbers and paths taken out), largest group first, each with an id for `retry --group`")
      .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
      .argument("[identity]", "show one node with its log tail")
      .addHelpText(
        "after",
        `
Examples:
  muster provision status                      every node: stage, master, elapsed, tries, last error
  muster provision status --failed --group     why nodes fail: one line per cause, with a count
  muster provision retry --group 3f9a1c7e5b    then retry one cause's nodes in one go`,
      )
      .action(async (identity: string | undefined, o: ProvisionOpts & { watch?: boolean; failed?: boolean; group?: boolean }) => {
        if (o.group && !o.failed) throw new MusterError("MUSTER_USAGE", "--group groups failed nodes: give it with --failed (muster provision status --failed --group)");
        if (identity && (o.failed || o.watch)) throw new MusterError("MUSTER_USAGE", "an identity shows one node: leave out --failed, --group and --watch");
        const { client, store } = await openStore(o);
        const { groupFailures } = await import("../../fleet/provision-failures.js");
        try {
          if (identity) {
            const v = await store.get(identity);
            if (!v) throw new MusterError("MUSTER_UNKNOWN_NODE", `the provisioner has no record of ${identity}: check the spelling against \`muster provision status\``);
            process.stdout.write(o.json ? `${JSON.stringify(v.record, null, 2)}\n` : `${renderStatusTable([v.record])}\n\nLog:\n${v.record.log.map((l) => `  ${l}`).join("\n")}\n`);
            return;
          }
          const show = async () => {
            let recs = await store.list();
            if (o.failed) recs = recs.filter((r) => r.status === "failed");
            const body = o.group ? (o.json ? groupFailures(recs) : renderFailureGroups(groupFailures(recs))) : o.json ? recs : renderStatusTable(recs);
            if (o.json) process.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
            else if (o.watch && process.stdout.isTTY) process.stdout.write(`\x1b[2J\x1b[H${new Date().toISOString()}  (ctrl-c to stop)\n\n${String(body)}\n`);
            else process.stdout.write(`${String(body)}\n`);
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
      .description("Provision failed nodes again from the start (the provisioner picks them up next cycle): by name, a whole cause at once (--group), or a master's (--master)")
      .argument("[identity...]", "node identities, as `muster provision status` lists them")
      .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
      .option("--force", "also start over a node that is done or pending (say, reinstalled): it is provisioned again once it waits in the provisioning collective")
      .option("--group <id>", "every failed node of this cause (an id from `muster provision status --failed --group`)")
      .option("--master <name>", "every failed node provisioned against this master (with --group: only the group's)")
      .option("--dry-run", "with --group or --master: list the nodes that would be retried, change nothing")
      .addHelpText(
        "after",
        `
Only failed nodes are retried: a node the provisioner has no record of is refused (exit 1,
MUSTER_UNKNOWN_NODE), and so is one that is done, pending or being provisioned (exit 1,
MUSTER_RETRY_REFUSED) unless --force is given for done or pending. If any identity is refused,
no record is changed. See docs/provisioner.md#retrying.

--group and --master retry every failed node they select, each with a compare-and-set: a node
that changed meanwhile (a provisioner or another operator wrote first) is left alone and named.
A group or master that selects no failed node is refused (exit 1, MUSTER_RETRY_REFUSED).`,
      )
      .action(async (ids: string[], o: ProvisionOpts & { force?: boolean; group?: string; master?: string; dryRun?: boolean }) => {
        const bulk = o.group !== undefined || o.master !== undefined;
        if (bulk && ids.length) throw new MusterError("MUSTER_USAGE", "give identities, or --group/--master, not both");
        if (bulk && o.force) throw new MusterError("MUSTER_USAGE", "--force applies to named nodes; --group and --master retry failed nodes only");
        if (!bulk && o.dryRun) throw new MusterError("MUSTER_USAGE", "--dry-run goes with --group or --master");
        if (!bulk && ids.length === 0) throw new MusterError("MUSTER_USAGE", "name the nodes to retry, or a cause with --group ID (from `muster provision status --failed --group`), or --master NAME");
        const { client, store } = await openStore(o);
        const { applyRetry, retryFailed, retryRefusal } = await import("../../fleet/provision-state.js");
        try {
          if (bulk) {
            const { selectFailed } = await import("../../fleet/provision-failures.js");
            const sel = { ...(o.group !== undefined ? { group: o.group } : {}), ...(o.master !== undefined ? { master: o.master } : {}) };
            const recs = await store.list();
            const what = [o.group !== undefined ? `group ${o.group}` : "", o.master !== undefined ? `master ${o.master || "(none)"}` : ""].filter(Boolean).join(" and ");
            if (selectFailed(recs, sel).length === 0) throw new MusterError("MUSTER_RETRY_REFUSED", `no failed node in ${what}: see \`muster provision status --failed --group\` for the groups and their ids\nNothing was changed.`);
            if (o.dryRun) {
              const chosen = selectFailed(recs, sel).map((r) => r.identity);
              process.stdout.write(o.json ? `${JSON.stringify(chosen)}\n` : `${chosen.join("\n")}\n${chosen.length} failed nodes in ${what} would be retried (--dry-run: nothing changed)\n`);
              return;
            }
            const r = await retryFailed(store, recs, sel, `${client.key.name} (muster provision retry, ${what})`);
            if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
            else {
              for (const id of r.retried) process.stdout.write(`${id}: queued for provisioning\n`);
              for (const id of r.changed) process.stdout.write(`${id}: changed meanwhile, left alone\n`);
              process.stdout.write(`${r.retried.length} of ${r.retried.length + r.changed.length} failed nodes in ${what} queued for provisioning\n`);
            }
            return;
          }
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
