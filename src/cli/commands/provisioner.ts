import { Command } from "commander";

export function provisionerCommand(): Command {
  return new Command("provisioner")
    .description("Run the provisioning daemon: take waiting nodes to their production Puppet state")
    .requiredOption("--config <file>", "provisioner config (mcprovision's YAML; see examples/provisioner.yaml)")
    .option("--once", "one discovery cycle (plus unfinished nodes of ours), provision them, exit (2 if any failed)")
    .option("--broker <url>", "broker URL(s), overrides the config's broker")
    .option("--foreground", "ignore `daemonize: true`")
    .addHelpText(
      "after",
      `
Steps (each switched by steps.* in the config): lock, set_puppet_hostname, clean_node_certname,
send_node_csr, sign_node_csr, puppet_bootstrap_stage, puppet_final_run, puppet_daemonize,
unlock (default: as lock), disable_provisioner, notify. Progress is kept in NATS KV: see \`muster provision status\`.
SIGTERM stops taking nodes, finishes or abandons current steps and releases node locks.`,
    )
    .action(async (o: { config: string; once?: boolean; broker?: string; foreground?: boolean }) => {
      const [{ createLogger }, { loadProvisionerConfig }, { detach, runProvisioner }] = await Promise.all([import("../../log.js"), import("../../provisioner/config.js"), import("../../provisioner/daemon.js")]);
      const cfg = loadProvisionerConfig(o.config);
      if (cfg.daemonize && !o.foreground && !o.once && !process.env.MUSTER_DAEMONIZED) {
        const pid = detach(process.argv.slice(1), cfg);
        process.stdout.write(`provisioner started in the background, pid ${pid}${cfg.logfile ? `, logging to ${cfg.logfile}` : ""}\n`);
        return;
      }
      const log = createLogger({ level: cfg.loglevel, file: cfg.logfile, name: "muster-provisioner" });
      process.exitCode = await runProvisioner(cfg, log, { once: !!o.once, broker: o.broker });
      log.flush();
    });
}
