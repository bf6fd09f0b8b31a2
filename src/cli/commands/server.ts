import { Command } from "commander";

export function serverCommand(): Command {
  return new Command("server")
    .description("Run the node daemon: host agents, answer discovery and RPC, publish registration")
    .option("--config <file>", "server config file (YAML); see examples/server.yaml")
    .option("--identity <name>", "override the node identity (default: config, else hostname)")
    .option("--broker <url>", "override the broker URL(s)")
    .option("--log-level <level>", "trace|debug|info|warn|error")
    .addHelpText("after", "\nStops cleanly on SIGTERM or SIGINT: stops taking requests, finishes in-flight actions, announces shutdown.")
    .addHelpText("after", "\nMUSTER_SERVER_V8=speed keeps V8's optimising compilers on. The default, size, leaves them off:\nabout 11 MB less resident, 1.27x the CPU a request under sustained load (docs/bench.md).")
    .action(async (o: { config?: string; identity?: string; broker?: string; logLevel?: string }) => {
      // before the daemon's modules load: see v8-tuning.ts
      (await import("../../server/v8-tuning.js")).tuneV8ForServer();
      const [{ loadServerConfig }, { startServer }, { builtinAgents }, { createLogger }] = await Promise.all([import("../../server/config.js"), import("../../server/server.js"), import("../../agents/builtin.js"), import("../../log.js")]);
      const cfg = loadServerConfig(o.config, o.identity ? { identity: o.identity } : {});
      if (o.identity) cfg.identity = o.identity;
      const log = createLogger({ level: o.logLevel ?? cfg.log.level, file: cfg.log.file, name: "muster-server" });
      // the server is handed its agents: it knows the contract (src/agent/), not the agents
      const srv = await startServer(cfg, log, { agents: builtinAgents, broker: o.broker });
      // Handlers before the ready line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`muster server ${cfg.identity} ready\n`);
      await stopping;
      log.info("shutting down");
      await srv.stop();
      log.flush();
    });
}
