import { Command } from "commander";
import { MusterError } from "../../errors.js";
import { addFilterOptions, openSession, type FilterOpts } from "../options.js";

// `muster health`: the site's health at a glance (docs/fleet.md#health): its own services, then its
// nodes, from what they already send (heartbeats, service heartbeats, Puppet runs) and the
// provisioning records; only a node quiet past its limit is asked (health/read.ts).

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
    .description("The site's health: its services (brokers, masters, provisioners, registry, console, notifier), then its nodes (unreachable, Puppet failed, stale or disabled, provisioning failed or gone), each with why")
    .option("--problems", "list unhealthy nodes only")
    .option("--unreachable-after <seconds>", "silence before a node counts as unreachable (at least 2.5 of its heartbeat intervals)", seconds("--unreachable-after"), 25)
    .option("--stale-after <seconds>", "time since the last Puppet run before it counts as stale (default: twice each node's runinterval)", seconds("--stale-after"))
    .option("--bucket <name>", "KV bucket of the provisioner (state_bucket)")
    .addHelpText(
      "after",
      `
The site's services come first: each broker member (as the console watching their monitoring
ports sees it), master (puppetserver and its CA), provisioner, the registry, the console and the
notifier, each alive by its own heartbeat, with every check that fails and why. A filter lists
nodes only.

A node is unreachable when its heartbeat (every 10 s by default) has not arrived for 25 s, or
its last heartbeat said it was stopping. Puppet's state comes with each heartbeat; its runs are
kept per node. Puppet is stale when its last run is older than twice the node's own runinterval
(puppet.conf; 30 minutes when unset), or than --stale-after for every node. Filters other than
-I are answered by the registry. A node quiet past its limit is asked (rpcutil ping) before it
is called unreachable; nothing else is sent to the nodes.

When this view cannot vouch for the silence (the alive store took no write from anyone for
longer than a node takes to count as unreachable), it says so first, and nobody is marked
unreachable for that silence: "I cannot see" is not "the node is gone". When the heartbeats
cannot be read at all (the store has no leader for a while after a broker's loss), the nodes the
last full read found are asked instead (kept in ~/.cache/muster/health; MUSTER_HEALTH_CACHE=off
turns that off): one that answers is there, one that does not is unreachable once its last
heartbeat then is older than --unreachable-after.

Where a registry answers for PuppetDB (docs/puppetdb.md), PuppetDB's reports are the record of
Puppet runs, and two disagreements are flagged: a node PuppetDB lists active that has not answered
(PuppetDB: active), and one that answers with no report in PuppetDB past the stale threshold
(PuppetDB: no report).

Exit codes: 0 everything healthy, 2 some node or service unhealthy, 1 nothing known (or matched).

Examples:
  muster health                       every node, unhealthy first, then a summary
  muster health --problems -C role::web
  muster health --json | jq '.nodes[] | select(.reachable | not) | .identity'`,
    )
    .action(async (o: HealthOpts) => {
      const s = await openSession(o);
      const [{ readFleetHealth }, { healthExitCode }, { renderHealth }, { AlertHistory }, { healthMemory }] = await Promise.all([import("../../health/read.js"), import("../../health/model.js"), import("../health-render.js"), import("../../health/alert-history.js"), import("../health-memory.js")]);
      try {
        const report = await readFleetHealth(s.client, {
          filter: s.filter,
          stateBucket: o.bucket ?? (s.config.provision_bucket as string | undefined),
          registryBucket: s.config.registry_bucket,
          policy: { unreachableAfterS: o.unreachableAfter ?? 25, ...(o.staleAfter !== undefined ? { puppetStaleAfterS: o.staleAfter } : {}) },
          onWarning: (m) => process.stderr.write(`warning: ${m}\n`),
          memory: healthMemory({ servers: s.broker.servers, collective: s.client.collective }),
        });
        const known = report.nodes.length + report.services.length;
        if (o.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
        else if (known) process.stdout.write(`${renderHealth(report, { problemsOnly: o.problems })}\n`);
        if (known === 0 && !o.json) process.stderr.write("no nodes known: none has sent a heartbeat, registered or been provisioned (or none matches the filters)\n");
        // the notifier's health is its last delivery (the alerts' history): say when the admins are not being told
        const delivery = (await AlertHistory.read(await s.client.streams(), 5000).catch(() => undefined))?.lastDelivery();
        if (delivery && !delivery.ok) process.stderr.write(`warning: alerts are not reaching the admins${delivery.failing_since ? ` (since ${delivery.failing_since})` : ""}: ${delivery.error ?? "not delivered"}; see \`muster alerts\`\n`);
        process.exitCode = healthExitCode(report);
      } finally {
        await s.client.close();
      }
    });
}
