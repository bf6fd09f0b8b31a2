import { Command } from "commander";
import { MusterError } from "../../errors.js";
import { addFilterOptions, openSession, type FilterOpts } from "../options.js";

// `muster health`: the fleet's health at a glance (docs/fleet.md#health), from what nodes already
// send (heartbeats, Puppet runs) and the provisioning records; no node is asked anything.

interface HealthOpts extends FilterOpts {
  bucket?: string;
  problems?: boolean;
  unreachableAfter?: number;
  staleAfter?: number;
}

const seconds = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new MusterError("MUSTER_USAGE", `${name} takes a number of seconds`);
  return n;
};

export function healthCommand(): Command {
  return addFilterOptions(new Command("health"))
    .description("The fleet's health: unreachable nodes, Puppet failed, stale or disabled, provisioning failed or gone, each with why")
    .option("--problems", "list unhealthy nodes only")
    .option("--unreachable-after <seconds>", "silence before a node counts as unreachable (at least 2.5 of its heartbeat intervals)", seconds("--unreachable-after"), 25)
    .option("--stale-after <seconds>", "time since the last Puppet run before it counts as stale (default: twice each node's runinterval)", seconds("--stale-after"))
    .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
    .addHelpText(
      "after",
      `
A node is unreachable when its heartbeat (every 10 s by default) has not arrived for 25 s, or
its last heartbeat said it was stopping. Puppet's state comes with each heartbeat; its runs are
kept per node. Puppet is stale when its last run is older than twice the node's own runinterval
(puppet.conf; 30 minutes when unset), or than --stale-after for every node. Filters other than
-I are answered by the registry. Nothing is sent to the nodes.

Exit codes: 0 every node healthy, 2 some node unhealthy, 1 no node known (or matched).

Examples:
  muster health                       every node, unhealthy first, then a summary
  muster health --problems -C role::web
  muster health --json | jq '.nodes[] | select(.reachable | not) | .identity'`,
    )
    .action(async (o: HealthOpts) => {
      const s = await openSession(o);
      const [{ readFleetHealth }, { healthExitCode }, { renderHealth }, { AlertHistory }] = await Promise.all([import("../../health/read.js"), import("../../health/model.js"), import("../health-render.js"), import("../../health/alert-history.js")]);
      try {
        const report = await readFleetHealth(s.client, {
          filter: s.filter,
          stateBucket: o.bucket ?? (s.config.provision_bucket as string | undefined),
          registryBucket: s.config.registry_bucket,
          policy: { unreachableAfterS: o.unreachableAfter ?? 25, ...(o.staleAfter !== undefined ? { puppetStaleAfterS: o.staleAfter } : {}) },
          onWarning: (m) => process.stderr.write(`warning: ${m}\n`),
        });
        if (o.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
        else if (report.nodes.length) process.stdout.write(`${renderHealth(report, { problemsOnly: o.problems })}\n`);
        if (report.nodes.length === 0 && !o.json) process.stderr.write("no nodes known: none has sent a heartbeat, registered or been provisioned (or none matches the filters)\n");
        // the notifier's health is its last delivery (the alerts' history): say when the admins are not being told
        const delivery = (await AlertHistory.read(await s.client.streams(), 5000).catch(() => undefined))?.lastDelivery();
        if (delivery && !delivery.ok) process.stderr.write(`warning: alerts are not reaching the admins${delivery.failing_since ? ` (since ${delivery.failing_since})` : ""}: ${delivery.error ?? "not delivered"}; see \`muster alerts\`\n`);
        process.exitCode = healthExitCode(report);
      } finally {
        await s.client.close();
      }
    });
}
