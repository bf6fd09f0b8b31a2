import { Command } from "commander";
import { userInfo } from "node:os";
import type { StepResult } from "../../fleet/decommission.js";
import { MusterError } from "../../errors.js";
import { Exit } from "../exit.js";
import { addCommonOptions, type CommonOpts } from "../options.js";

// `muster decommission ID...`: a node leaves the fleet for good (src/fleet/decommission.ts).

interface DecommissionOpts extends CommonOpts {
  wait?: boolean;
  masters?: string;
  notify: boolean;
  notifyTo?: string[];
  bucket?: string;
  registryBucket?: string;
  dt?: string;
  timeout?: string;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

function seconds(name: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new MusterError("MUSTER_USAGE", `${name} takes a positive number of seconds, got ${JSON.stringify(v)}`);
  return n;
}

export function decommissionCommand(): Command {
  return addCommonOptions(new Command("decommission"))
    .description("Take nodes out of the fleet for good: revoke and clean their certificates on every master, deactivate them in PuppetDB, drop their registry and provisioning records, tell the admins")
    .argument("<identity...>", "node identities (their Puppet certnames)")
    .option("--wait", "report each step as it completes, and check it took effect (the CA no longer knows the name, PuppetDB lists it inactive, the records read back absent)")
    .option("--masters <filter>", "compound filter narrowing the masters (default: every node with the puppetca agent)")
    .option("--no-notify", "do not tell the admins")
    .option("--notify-to <url>", "recipient for the notification (repeatable; default: the notifier's own)", collect)
    .option("--bucket <name>", "the provisioner's KV bucket (state_bucket)")
    .option("--registry-bucket <name>", "the registry's KV bucket (default: registry_bucket in the client config, else muster-registry)")
    .option("--dt <seconds>", "discovery timeout for masters and the notifier", "2")
    .option("--timeout <seconds>", "how long each master and the notifier may take to answer", "60")
    .addHelpText(
      "after",
      `
What it does, per node, in this order (docs/provisioner.md#decommissioning):
  provisioning  drops the provisioner's record (a provisioner still working on it leaves it)
  certificate   asks every master's puppetca agent to revoke and clean the certname
  puppetdb      asks every master's puppetca agent to deactivate it in the PuppetDB of the
                master's puppetdb.conf, as \`puppet node deactivate\` does (nothing to do
                without one)
  registry      drops the node's registry record
  notify        tells the admins through the notify agent
The node itself is never asked: it may be gone already. Every step is idempotent: running it
again, or after a partial failure, finishes the job; "already gone" is success. A machine that
later comes back under the same name is provisioned from scratch, with a new CSR signed.

Nothing is changed when no master answers discovery (exit 1, MUSTER_NO_MASTER).

Examples:
  muster decommission node07.eu.lab
  muster decommission --wait web3.example.net web4.example.net
  muster decommission --masters "country=de" --no-notify old1.example.net

Exit code 0 when every step succeeded for every node, 2 when any failed (run it again),
1 when no master answered, 64 for bad arguments.`,
    )
    .action(async (ids: string[], o: DecommissionOpts) => {
      const [{ MusterClient }, { resolveBrokers }, { checkDecommissionIds, decommission }, { DEFAULT_STATE_BUCKET }, { DEFAULT_BUCKET }, { loadClientConfig }, { bold, green, red, yellow }] = await Promise.all([
        import("../../client/client.js"),
        import("../../broker/connect.js"),
        import("../../fleet/decommission.js"),
        import("../../provisioner/config.js"),
        import("../../registry/bucket.js"),
        import("../config.js"),
        import("../output.js"),
      ]);
      checkDecommissionIds(ids); // bad names: a clear error, nothing sent
      const dt = seconds("--dt", o.dt, 2);
      const timeout = seconds("--timeout", o.timeout, 60);
      const cfg = loadClientConfig(o.config);
      const client = await MusterClient.connect({ brokers: resolveBrokers(o.broker, cfg.brokers), collective: o.target ?? cfg.collective, name: "muster-decommission", tls: cfg.tls });
      const width = Math.max(...ids.map((i) => i.length));
      const line = (r: StepResult) => `${r.identity.padEnd(width)}  ${r.step.padEnd(12)}  ${r.ok ? (r.changed ? green("done") : "ok  ") : red("FAILED")}  ${r.detail}  (${r.ms} ms)\n`;
      try {
        const outcomes = await decommission(client, ids, {
          masterSelect: o.masters,
          notify: o.notify,
          recipients: o.notifyTo,
          stateBucket: o.bucket ?? (cfg.provision_bucket as string | undefined) ?? DEFAULT_STATE_BUCKET,
          registryBucket: o.registryBucket ?? cfg.registry_bucket ?? DEFAULT_BUCKET,
          verify: o.wait === true,
          discoveryTimeoutMs: dt * 1000,
          timeoutMs: timeout * 1000,
          operator: userInfo().username,
          onStep: o.wait && !o.json ? (r) => process.stdout.write(line(r)) : undefined,
        });
        if (o.json) process.stdout.write(`${JSON.stringify(outcomes, null, 2)}\n`);
        else {
          if (!o.wait) {
            for (const n of outcomes) {
              const failed = n.steps.filter((s) => !s.ok);
              const summary = failed.length ? red(`INCOMPLETE: ${failed.map((s) => `${s.step}: ${s.detail}`).join("; ")}`) : n.steps.some((s) => s.changed && s.step !== "notify") ? green("decommissioned") : "already gone";
              process.stdout.write(`${n.identity.padEnd(width)}  ${summary}\n`);
            }
          }
          for (const n of outcomes.filter((x) => x.stillRunning)) process.stdout.write(yellow(`${n.identity} still answers in the fleet: shut the machine down, or it registers again\n`));
          const ok = outcomes.filter((n) => n.ok).length;
          process.stdout.write(`\n${bold(`${ok} of ${outcomes.length} node(s) decommissioned`)}${ok < outcomes.length ? "; run it again once the failed steps' cause is fixed (it is idempotent)" : ""}\n`);
        }
        process.exitCode = outcomes.every((n) => n.ok) ? Exit.OK : Exit.SomeFailed;
      } finally {
        await client.close();
      }
    });
}
