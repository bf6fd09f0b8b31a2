import { Command } from "commander";
import { lookupFact } from "../../protocol/facts.js";
import { MusterError } from "../../errors.js";
import { DEFAULT_REGISTRY_BUCKET as DEFAULT_BUCKET } from "../../protocol/buckets.js";
import type { RegistryRecord } from "../../registry/record.js";
import { addCommonOptions, addFilterFlags, type FilterOpts } from "../options.js";

// `muster registry serve`: the registry daemon. `muster registry query`: its records, filtered.

const PREFERRED_FACTS = ["ipaddress", "os.family", "os.release.major", "country", "role", "environment"];

export function registryCommand(): Command {
  const cmd = new Command("registry")
    .description("Node registry: every node's registration data in NATS KV, for --dm registry and queries")
    .addHelpText(
      "after",
      `
Nodes publish their identity, facts, classes, agents and collectives to <collective>.registration
every registration interval (server config: registration.interval). \`muster registry serve\`
keeps the latest of each in the KV bucket (default ${DEFAULT_BUCKET}); nodes not heard within
max_age expire. Then:
  muster find --dm registry -S "country=de and web"     discovery without a broadcast
  muster registry query -F country=de                    the matching nodes with their metadata
  curl 'http://127.0.0.1:8089/nodes?fact=country=de'     the same over HTTP (http: in the config)
See docs/registry.md.`,
    );
  cmd.addCommand(serveCommand());
  cmd.addCommand(queryCommand());
  return cmd;
}

function serveCommand(): Command {
  return new Command("serve")
    .description("Run the registry daemon: store registrations in KV, answer queries, serve HTTP if configured")
    .option("--config <file>", "registry config (YAML/JSON; see docs/registry.md); every key has a default")
    .option("--broker <url>", "broker URL(s), overrides the config's broker")
    .option("--log-level <level>", "trace|debug|info|warn|error (overrides the config's log.level)")
    .addHelpText(
      "after",
      `
Config keys (all optional): broker, collectives [muster], bucket [${DEFAULT_BUCKET}], max_age
seconds [900], refresh seconds [max_age/10], flush_interval seconds [0.25], max_payload bytes
[1048576], max_pending [200000], fill_on_start [true: ask the nodes to register now],
http {host [127.0.0.1], port [8089], token_file: bearer token HTTP clients must send}, log {level, file}.
Prints a line containing 'ready' once it serves; stops on SIGTERM/SIGINT.`,
    )
    .action(async (o: { config?: string; broker?: string; logLevel?: string }) => {
      const [{ loadRegistryConfig }, { createLogger }] = await Promise.all([import("../../registry/config.js"), import("../../log.js")]);
      const cfg = loadRegistryConfig(o.config);
      const log = createLogger({ level: o.logLevel ?? cfg.log.level, file: cfg.log.file, name: "muster-registry" });
      const { startRegistry } = await import("../../registry/daemon.js"); // HTTP and metrics stacks only here
      const reg = await startRegistry(cfg, log, { broker: o.broker });
      // Handlers before the ready line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`registry bucket ${cfg.bucket}, collectives ${cfg.collectives.join(",")}, ${reg.store.size} nodes${reg.httpAddress ? `, http ${reg.httpAddress}` : ""}: ready\n`);
      await stopping;
      await reg.stop();
      log.flush();
    });
}

interface QueryOpts extends FilterOpts {
  bucket?: string;
  facts?: string;
}

const STORED_NOTE = "STORED: when the registry last wrote the node's record. A registration that changes nothing is written only once the record is `refresh` old (max_age/10 by default), so a live node may show up to that age.";

function age(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}

function factText(facts: Record<string, unknown>, path: string): string {
  const cur = lookupFact(facts, path);
  if (cur === undefined || cur === null) return "-";
  return typeof cur === "object" ? JSON.stringify(cur) : String(cur);
}

function table(records: RegistryRecord[], columns: string[], now: number): string {
  // The bucket holds when the registry last *wrote* a node's record, not when the node last
  // registered: unchanged registrations are written only every `refresh`. The column says so.
  const head = ["IDENTITY", "STORED", ...columns.map((c) => c.toUpperCase())];
  const rows = records.map((r) => [r.identity, age(now - r.last_seen), ...columns.map((c) => factText(r.facts, c))]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join("  ");
  return [line(head), ...rows.map(line)].join("\n") + `\n\n${records.length} node${records.length === 1 ? "" : "s"}\n${STORED_NOTE}\n`;
}

function queryCommand(): Command {
  return addFilterFlags(addCommonOptions(new Command("query")))
    .description("List the registered nodes matching the filters, with their metadata (reads the registry bucket)")
    .option("--bucket <name>", `registry bucket (default: registry_bucket in the client config, else ${DEFAULT_BUCKET})`)
    .option("--facts <list>", `facts to show as columns, comma-separated (default: those of ${PREFERRED_FACTS.join(", ")} the nodes have, up to 4)`)
    .addHelpText(
      "after",
      `
Examples:
  muster registry query -F country=de
  muster registry query -S "web and not environment=staging" --facts ipaddress,os.family
  muster registry query -I /^db/ --json          full metadata: facts, classes, agents, last_seen...

Only nodes of the collective (-T, else the client config's) that registered within the
registry's max_age are listed. Data plugins in -S: fact() and agent() only (docs/registry.md).
Exit code 1 when nothing matches.`,
    )
    .action(async (o: QueryOpts) => {
      const [{ MusterClient }, { isValidBucketName }, { nodeView }, { loadClientConfig, resolveBrokerSettings }, { filterFromOpts }] = await Promise.all([
        import("../../client/client.js"),
        import("../../registry/bucket.js"),
        import("../../registry/record.js"),
        import("../config.js"),
        import("../session.js"),
      ]);
      const config = loadClientConfig(o.config);
      const filter = filterFromOpts(o, config);
      const bucket = o.bucket ?? config.registry_bucket ?? DEFAULT_BUCKET;
      if (!isValidBucketName(bucket)) throw new MusterError("MUSTER_USAGE", `invalid bucket name ${JSON.stringify(bucket)}: letters, digits, - and _ only`);
      const collective = o.target ?? config.collective;
      const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
      const client = await MusterClient.connect({ brokers: broker.servers, collective, name: "muster-registry-query", tls: broker.tls, from: broker.from });
      try {
        const source = await client.registry({ bucket, onWarning: (m) => process.stderr.write(`warning: ${m}\n`) });
        const records = await source.records(filter);
        const now = Date.now();
        if (o.json) process.stdout.write(`${JSON.stringify(records.map((r) => nodeView(r, now)), null, 2)}\n`);
        else {
          const columns = o.facts ? o.facts.split(",").map((s) => s.trim()).filter(Boolean) : PREFERRED_FACTS.filter((f) => records.some((r) => factText(r.facts, f) !== "-")).slice(0, 4);
          process.stdout.write(records.length ? table(records, columns, now) : "no registered node matches\n");
        }
        process.exitCode = records.length ? 0 : 1;
      } finally {
        await client.close();
      }
    });
}
