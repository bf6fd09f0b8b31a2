import { Command } from "commander";

// `muster privileged serve`: the node daemon's privileged helper (docs/decisions/privileged-helper.md).
// Under systemd, muster-privileged.socket passes the listening socket (LISTEN_FDS); by hand or in a
// test, --socket names a path to listen on.
export function privilegedCommand(): Command {
  const cmd = new Command("privileged").description("The node daemon's privileged helper: the few operations muster server may ask root for");
  cmd
    .command("serve")
    .description("Serve the fixed list of privileged operations to one user (socket-activated by muster-privileged.socket)")
    .option("--config <file>", "root's server config: the helper reads the agents' settings from it", "/etc/muster/server.yaml")
    .option("--client-user <user>", "the only user served (name or uid): the node daemon's", "muster")
    .option("--socket <path>", "listen on this path (root:<client's group>, 0660) instead of the socket systemd passes")
    .option("--idle-exit <seconds>", "exit after this long with no connection (socket-activated, the next connection starts it again); 0: never", "0")
    .option("--max-connections <n>", "connections served at once; more are answered MUSTER_PRIVILEGED_BUSY and closed", "16")
    .option("--read-timeout <seconds>", "how long a connection has to send its whole request line", "30")
    .option("--log-level <level>", "trace|debug|info|warn|error")
    .addHelpText(
      "after",
      `
Operations (nothing else is accepted; settings come from --config, never from the request):
  puppet.run, puppet.daemonize, puppet.disable, puppet.enable, puppet.cert_status,
  puppet.request_certificate, puppet.set_server, puppet.tls_credential, puppet.resource,
  provision.persist_stage; read-only: puppet.facts, puppet.read_state, puppet.last_run_report
puppet.resource takes only what muster's rule lists for file, package and service (no
property that runs a command or leaves plugins.resource.file_paths; no file where root
runs code; no package pinned down, held, or Essential removed), and a file only through
directories root alone can change, checked again just before its Puppet starts.

Each connection's peer uid is read from the kernel (SO_PEERCRED); another uid is refused.
One Puppet process runs at a time (a run, puppet resource, a certificate request); the
rest wait their turn. Every request is logged with its arguments (a file's content and
fact values by size and digest only).
Stops on SIGTERM once the operations in flight have finished. The package's unit passes
--idle-exit 10: between a node's rare privileged operations the helper holds no memory.`,
    )
    .action(async (o: { config: string; clientUser: string; socket?: string; idleExit: string; maxConnections: string; readTimeout: string; logLevel?: string }) => {
      const [{ serveHelper, resolveUser }, { helperSettings }, { loadServerConfig }, { createLogger }, { MusterError }, { keepPuppetSettingsIn }, { cacheFileFor, ownCacheFile }] = await Promise.all([
        import("../../privileged/helper.js"),
        import("../../agents/helper-settings.js"),
        import("../../server/config.js"),
        import("../../log.js"),
        import("../../errors.js"),
        import("../../puppet/code-dirs.js"),
        import("../cache.js"),
      ]);
      const log = createLogger({ level: o.logLevel, name: "muster-privileged" });
      // Puppet's settings as printed, kept between starts (it exits when idle) in its own cache
      // directory, root's and 0700 (the unit's CacheDirectory): not one Ruby process per Puppet run
      const kept = cacheFileFor(process.env, "puppet-settings", "v1");
      keepPuppetSettingsIn(kept ? ownCacheFile(kept) : undefined);
      const idleS = Number(o.idleExit);
      if (!Number.isFinite(idleS) || idleS < 0) throw new MusterError("MUSTER_USAGE", `--idle-exit takes a number of seconds (0: never), not ${JSON.stringify(o.idleExit)}`);
      const maxConnections = Number(o.maxConnections);
      if (!Number.isInteger(maxConnections) || maxConnections < 1) throw new MusterError("MUSTER_USAGE", `--max-connections takes a whole number of at least 1, not ${JSON.stringify(o.maxConnections)}`);
      const readS = Number(o.readTimeout);
      if (!Number.isFinite(readS) || readS <= 0) throw new MusterError("MUSTER_USAGE", `--read-timeout takes a number of seconds, not ${JSON.stringify(o.readTimeout)}`);
      const client = resolveUser(o.clientUser);
      // The socket systemd passed us (sd_listen_fds: LISTEN_PID is ours, the first fd is 3).
      const activated = process.env.LISTEN_FDS && Number(process.env.LISTEN_PID) === process.pid;
      if (!activated && !o.socket) throw new MusterError("MUSTER_USAGE", "no socket: start it through muster-privileged.socket, or give --socket PATH");
      const listen = activated ? { fd: 3 } : { path: o.socket!, ...(client.gid !== undefined ? { group: client.gid } : {}) };
      // Root's config, read afresh for every request with the agents' own settings readers.
      const settings = () => helperSettings(o.config, loadServerConfig(o.config));
      const helper = await serveHelper(listen, { settings, clientUid: client.uid, log, idleMs: idleS * 1000, maxConnections, readTimeoutMs: readS * 1000 });
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`muster privileged helper ready (serving uid ${client.uid})\n`);
      const why = await Promise.race([stopping.then(() => "signal" as const), helper.idle.then(() => "idle" as const)]);
      log.info(why === "idle" ? `no connection for ${idleS} s: exiting (the socket starts the helper again)` : "stopping: finishing the operations in flight");
      await helper.close();
      log.flush();
    });
  return cmd;
}
