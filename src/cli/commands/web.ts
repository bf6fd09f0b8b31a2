import { Command } from "commander";

// `muster web`: the web console. Only commander and option text load here; the server stack
// (fastify, the client) loads inside the action.

export function webCommand(): Command {
  return new Command("web")
    .description("Serve the web console: the fleet's health, the provisioning board, the fleet explorer, node pages and runall")
    .option("--config <file>", "console config (YAML/JSON; see docs/web.md): auth, tls, registry, state_bucket")
    .option("--listen <host:port>", "where to listen (default 127.0.0.1:8480, or the config's listen)")
    .option("--broker <url>", "broker URL(s), overrides MUSTER_BROKER and the config")
    .option("--client-config <file>", "client config to find the broker in (default: as every command)")
    .option("--log-level <level>", "trace|debug|info|warn|error", "info")
    .addHelpText(
      "after",
      `
Every request is authenticated. A tokens file (auth.tokens_file) holds one line per person:
  <token> <role> <name>        role: viewer (looks) or operator (also retries and starts runall)
Browsers sign in at the console's URL with their token (a session cookie follows); API clients
send "Authorization: Bearer <token>". With tls.ca set, client certificates it signed are
accepted too, their role from tls.roles (common name -> role).

Example:
  printf '%s operator alice\\n' "$(openssl rand -hex 24)" > tokens
  printf 'auth:\\n  tokens_file: tokens\\n' > web.yaml
  muster web --config web.yaml

It binds to loopback unless told otherwise, reads the board from the provisioner's state bucket
and the explorer from the registry's HTTP API (registry.url, default http://127.0.0.1:8089), and
says on the page which of them is down. Prints a line containing 'ready' with its URL once it
listens; stops on SIGTERM/SIGINT. See docs/web.md.`,
    )
    .action(async (o: { config?: string; listen?: string; broker?: string; clientConfig?: string; logLevel: string }) => {
      const [{ loadWebConfig, parseListen }, { startWeb }, { createLogger }, { MusterError }] = await Promise.all([import("../../web/config.js"), import("../../web/daemon.js"), import("../../log.js"), import("../../errors.js")]);
      const cfg = loadWebConfig(o.config);
      if (o.listen !== undefined) {
        try {
          parseListen(o.listen);
        } catch (e) {
          throw new MusterError("MUSTER_USAGE", `--listen: ${(e as Error).message}`);
        }
        cfg.listen = o.listen;
      }
      const log = createLogger({ level: o.logLevel, name: "muster-web" });
      const web = await startWeb(cfg, log, { broker: o.broker, clientConfig: o.clientConfig });
      // Handlers before the ready line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`muster web console at ${web.url}/ : ready\n`);
      await stopping;
      await web.stop();
      log.flush();
    });
}
