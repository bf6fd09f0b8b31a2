import { existsSync } from "node:fs";
import { join } from "node:path";
import { Command, InvalidArgumentError } from "commander";
import type { BrokerAuthSpec, BrokerAuthSpecSchema } from "../../broker/auth.js";
import { BOOTSTRAP_DAYS, BOOTSTRAP_ORG } from "../../broker/bootstrap-defaults.js";
import { MusterError } from "../../errors.js";
import { DEFAULT_STATE_BUCKET } from "../../protocol/buckets.js";

// `muster broker users --spec FILE`: nats-server's users and permissions for a muster fleet, from
// a short description of who connects (the same generator `muster lab up` uses).
// `muster broker bootstrap-credential`: one node's own bootstrap certificate (the lab issues one
// per node the same way; cloud tooling calls it once per instance).

const positiveInt = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 3650) throw new MusterError("MUSTER_USAGE", `${flag} takes a whole number of days from 1 to 3650`);
  return n;
};

const generationArg = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 9999) throw new MusterError("MUSTER_USAGE", "--generation takes a whole number from 1 to 9999");
  return n;
};

/**
 * Identities whose bootstrap credential is no longer needed: the provisioner's record says done, or
 * its last completed stage is `disable` or later (the node has switched to its Puppet certificate;
 * the notification, which may run this very command, comes after that).
 */
async function provisionedIdentities(o: { broker?: string; config?: string; bucket?: string }): Promise<string[]> {
  const [{ MusterClient }, { ProvisionState }, { Stages }, { loadClientConfig, resolveBrokerSettings }] = await Promise.all([
    import("../../client/client.js"),
    import("../../provisioner/state.js"),
    import("../../protocol/provision-record.js"),
    import("../config.js"),
  ]);
  const cfg = loadClientConfig(o.config);
  const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
  const client = await MusterClient.connect({ brokers: broker.servers, collective: cfg.collective, name: "muster-broker-users", tls: broker.tls, from: broker.from });
  try {
    const bucket = o.bucket ?? (cfg.provision_bucket as string | undefined) ?? DEFAULT_STATE_BUCKET;
    const store = await ProvisionState.openExisting(client, bucket);
    const disabled = Stages.indexOf("disable");
    return store ? (await store.list()).filter((r) => r.status === "done" || (r.stage !== undefined && Stages.indexOf(r.stage) >= disabled)).map((r) => r.identity) : [];
  } finally {
    await client.close();
  }
}

/** `broker users --issue`: a credential for every listed, unretired bootstrap node that has none in `dir` yet. */
async function issueMissing(spec: ReturnType<typeof BrokerAuthSpecSchema.parse>, dir: string, ca: { cert: string; key: string }): Promise<void> {
  const { issueBootstrapCredential, writeBootstrapCredential } = await import("../../broker/bootstrap.js");
  const retired = new Set(spec.provisioned);
  for (const b of spec.bootstrap) {
    if (b.identity === undefined || retired.has(b.identity)) continue;
    const generation = b.generation ?? 1;
    const where = generation === 1 ? join(dir, b.identity) : join(dir, b.identity, `generation-${generation}`);
    if (existsSync(join(where, "bootstrap.pem"))) continue; // issued before: the node may hold it already
    const c = issueBootstrapCredential(ca, b.identity, { org: spec.bootstrap_org, generation });
    writeBootstrapCredential(c, where);
    process.stderr.write(`issued ${c.user} -> ${join(where, "bootstrap.pem")}\n`);
  }
}

export function brokerCommand(): Command {
  const broker = new Command("broker").description("nats-server configuration for a muster fleet (users and permissions, bootstrap credentials, the stores nodes write to)");
  broker.addCommand(
    new Command("config")
      .description("Print nats-server's own config (/etc/nats-server.conf on Debian): TLS with a user per certificate, JetStream, and a cluster when routes are given")
      .requiredOption("--name <name>", "this server's name, unique in the cluster (e.g. nats1)")
      .option("--route <url>", "a cluster member's route, nats-route://HOST:6222; give every member's, this one's too (repeatable)", (v: string, prev: string[] = []) => [...prev, v])
      .option("--listen <host:port>", "the client port", "0.0.0.0:4222")
      .option("--monitor <host:port>", "the monitoring port (connz, varz, healthz)", "0.0.0.0:8222")
      .option("--cluster-name <name>", "the cluster's name", "muster")
      .option("--cluster-listen <host:port>", "the route port", "0.0.0.0:6222")
      .option("--max-memory-store <size>", "JetStream's memory limit (e.g. 256MB); default nats-server's")
      .option("--max-file-store <size>", "JetStream's disk limit (e.g. 10GB); default nats-server's")
      .option("--sync-interval <always|duration>", "how often JetStream forces its store to disk: always (each write, before it is acknowledged) or a duration (1s); nats-server's default, 2 min, lets a member that loses power lose what it acknowledged. nats-server 2.10+ (Debian 13)")
      .addHelpText(
        "after",
        `
Files it names (on the broker machine; see docs/deploy.md#3-the-broker):
  /etc/nats/server.pem, server.key   the broker's certificate (server and client use: members connect to each other)
  /etc/nats/clients-ca.pem           who may connect: your CA and every Puppet CA whose nodes connect
  /etc/nats/ca.pem                   your CA alone: what members present to each other
  /etc/nats/muster-users.conf        the users (muster broker users --spec FILE)
  /var/lib/nats/jetstream            JetStream's store (owned by the nats user)

Example, the first of three:
  muster broker config --name nats1 --route nats-route://nats1.example.net:6222 \\
    --route nats-route://nats2.example.net:6222 --route nats-route://nats3.example.net:6222 \\
    --sync-interval always > nats-server.conf`,
      )
      .action(async (o: { name: string; route?: string[]; listen: string; monitor: string; clusterName: string; clusterListen: string; maxMemoryStore?: string; maxFileStore?: string; syncInterval?: string }) => {
        const { brokerConfigProblem, brokerServerConfig } = await import("../../broker/server-config.js");
        const opts = { serverName: o.name, routes: o.route, listen: o.listen, monitor: o.monitor, clusterName: o.clusterName, clusterListen: o.clusterListen, maxMemoryStore: o.maxMemoryStore, maxFileStore: o.maxFileStore, syncInterval: o.syncInterval };
        const why = brokerConfigProblem(opts);
        if (why) throw new MusterError("MUSTER_USAGE", why);
        process.stdout.write(brokerServerConfig(opts));
      }),
  );
  broker.addCommand(
    new Command("users")
      .description("Print nats-server's authorization block: one user per credential, with what it may subscribe and publish")
      .requiredOption("--spec <file>", "who connects (YAML): collectives, provisioning_collective, nodes, bootstrap, provisioners, admins, registries")
      .option("--json", "print the users as JSON instead of nats-server config")
      .option("--retire-provisioned", "single-use bootstrap credentials: leave out the bootstrap users of nodes the provisioner's state bucket marks done or disabled (asks the broker)")
      .option("--bucket <name>", "the provisioner's state bucket, with --retire-provisioned (default: provision_bucket in the client config, else muster_provision)")
      .option("--broker <url>", "broker to read the state bucket from, with --retire-provisioned (default: $MUSTER_BROKER, the client config)")
      .option("--config <file>", "client config file, with --retire-provisioned")
      .option("--issue <dir>", "also issue each listed node's bootstrap credential that <dir> lacks: <dir>/<identity>/ (generation n > 1: <dir>/<identity>/generation-<n>/); needs --ca-cert, --ca-key")
      .option("--ca-cert <file>", "with --issue: the CA nats-server trusts for client certificates")
      .option("--ca-key <file>", "with --issue: that CA's private key")
      .addHelpText(
        "after",
        `
Users are named as nats-server's verify_and_map names a client certificate: its subject in RFC 2253
form. A node's Puppet certificate is "CN=<certname>" (the default for each node); give services a
subject with OU and O (e.g. "CN=provisioner,OU=service,O=example"), which the Puppet CA never issues.
A node's bootstrap credential (muster broker bootstrap-credential) is "CN=<id>,OU=bootstrap,O=muster".

Example spec:
  collectives: [muster]
  provisioning_collective: provisioning
  nodes:
    - identity: web1.example.com        # user CN=web1.example.com
    - identity: notify1.example.com
      notifier: true                    # may keep notify dedupe keys in KV (notify_bucket)
  bootstrap:
    - identity: web2.example.com        # its own credential: CN=web2.example.com,OU=bootstrap,O=muster
                                        # (--issue DIR writes it to DIR/web2.example.com/)
  provisioned: [web1.example.com]       # single-use: these nodes' bootstrap users are left out
  provisioners: ["CN=provisioner,OU=service,O=example"]
  admins: ["CN=ops,OU=service,O=example"]

Put the output in nats-server.conf next to a tls block with verify_and_map: true, and reload
nats-server (nats-server --signal reload) when nodes are added or provisioned. See docs/security.md.`,
      )
      .action(async (o: { spec: string; json?: boolean; retireProvisioned?: boolean; bucket?: string; broker?: string; config?: string; issue?: string; caCert?: string; caKey?: string }) => {
        const [{ authorizationConfig, brokerUsers, BrokerAuthSpecSchema }, { loadConfigFile }] = await Promise.all([import("../../broker/auth.js"), import("../../config/load.js")]);
        const spec: BrokerAuthSpec = loadConfigFile(o.spec, BrokerAuthSpecSchema, "broker spec");
        if (o.issue && (!o.caCert || !o.caKey)) throw new MusterError("MUSTER_USAGE", "--issue needs --ca-cert and --ca-key (the CA that signs bootstrap credentials)");
        if (o.retireProvisioned) spec.provisioned = [...(spec.provisioned ?? []), ...(await provisionedIdentities(o))];
        if (o.issue) await issueMissing(BrokerAuthSpecSchema.parse(spec), o.issue, { cert: o.caCert!, key: o.caKey! });
        try {
          process.stdout.write(o.json ? `${JSON.stringify(brokerUsers(spec), null, 2)}\n` : authorizationConfig(spec));
        } catch (e) {
          throw new MusterError("MUSTER_CONFIG_INVALID", `broker spec ${o.spec}: ${(e as Error).message}`);
        }
      }),
  );
  broker.addCommand(
    new Command("bootstrap-credential")
      .description("Issue nodes' own bootstrap certificates: each reaches only its node's provisioning subject")
      .requiredOption("--identity <id...>", "node identities (one credential each)")
      .requiredOption("--ca-cert <file>", "the CA nats-server trusts for client certificates (ca_file)")
      .requiredOption("--ca-key <file>", "that CA's private key")
      .option("--out <dir>", "write <dir>/<identity>/{bootstrap.pem,bootstrap.key,ca.pem}; without it, print JSON with the PEM text")
      .option("--org <name>", "O= of the subject, the broker spec's bootstrap_org", BOOTSTRAP_ORG)
      .option("--days <n>", "validity in days", positiveInt("--days"), BOOTSTRAP_DAYS)
      .option("--generation <n>", "which issue of the credential: 2, 3, ... when rotating (user OU=bootstrap-<n>)", generationArg, 1)
      .addHelpText(
        "after",
        `
The certificate's subject is /O=<org>/OU=bootstrap/CN=<identity>, which nats-server maps to user
"CN=<identity>,OU=bootstrap,O=<org>". List each node in the broker spec as "bootstrap: [{identity}]"
and run muster broker users: that user may subscribe to provisioning.node.<identity> only, so a
stolen credential reaches one waiting node. On the node:

  provisioning:
    cert: /etc/muster/bootstrap.pem
    key: /etc/muster/bootstrap.key

Cloud tooling calls this once per instance (or issueBootstrapCredential() from src/broker/bootstrap.ts)
and writes the files through the instance's user data. Rotating: issue --generation 2, list
{identity, generation: 2} beside the old entry, reload, swap the files on the node, drop the old
entry, reload. Single use and rotation in full: docs/security.md#bootstrap-credentials.`,
      )
      .action(async (o: { identity: string[]; caCert: string; caKey: string; out?: string; org: string; days: number; generation: number }) => {
        const { issueBootstrapCredential, writeBootstrapCredential } = await import("../../broker/bootstrap.js");
        const ids = [...new Set(o.identity)];
        const creds = ids.map((id) => issueBootstrapCredential({ cert: o.caCert, key: o.caKey }, id, { org: o.org, days: o.days, generation: o.generation }));
        if (!o.out) {
          process.stdout.write(`${JSON.stringify(creds, null, 2)}\n`);
          return;
        }
        for (const c of creds) {
          const files = writeBootstrapCredential(c, `${o.out}/${c.identity}`);
          process.stdout.write(`${c.identity}: user ${c.user} -> ${files.cert}, ${files.key}\n`);
        }
      }),
  );
  broker.addCommand(
    new Command("stores")
      .description("Create the buckets and streams nodes write to and history is kept in (alive, Puppet runs, runall history, audit, alerts' history), with an admin credential")
      .option("--broker <url>", "NATS broker URL(s), comma-separated (default: $MUSTER_BROKER, the client config)")
      .option("--config <file>", "client config file")
      .option("--replicas <n>", "copies of each store in a JetStream cluster (the number of brokers, up to 3); an existing store keeps its own", (v) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1 || n > 5) throw new InvalidArgumentError("a whole number from 1 to 5");
        return n;
      })
      .option("--rebuild <member>", "instead: rebuild this cluster member's copy of every replicated stream (a member back from a crash whose copy stays behind)")
      .option("--stream <name...>", "with --rebuild: only these streams")
      .option("--json", "print machine-readable JSON")
      .addHelpText(
        "after",
        `
Nodes write their heartbeats, Puppet runs and audit records but may not create the stores they
go to: the web console creates them when it starts; this does the same where no console runs.
An existing store keeps its settings. docs/fleet.md#health, docs/deploy.md.

--rebuild MEMBER (a server_name, e.g. nats2): nats-server 2.10 can leave a member that lost its
power with a copy that never catches up (its /jsz shows a lower last_seq than the others' for
minutes). Each stream's leadership is moved off the member, the member taken out, and the stream
put back to its copies, so the member copies it afresh; writes go on meanwhile.
  muster broker stores --rebuild nats2
  muster broker stores --rebuild nats2 --stream KV_muster_provision
docs/deploy.md#a-broker-back-from-a-power-cut.`,
      )
      .action(async (o: { broker?: string; config?: string; json?: boolean; replicas?: number; rebuild?: string; stream?: string[] }) => {
        const [{ MusterClient }, { ensureFleetStores }, { loadClientConfig, resolveBrokerSettings }] = await Promise.all([import("../../client/client.js"), import("../../fleet/stores.js"), import("../config.js")]);
        const cfg = loadClientConfig(o.config);
        const b = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
        if (o.stream && !o.rebuild) throw new MusterError("MUSTER_USAGE", "--stream goes with --rebuild MEMBER");
        if (o.replicas && o.rebuild) throw new MusterError("MUSTER_USAGE", "--rebuild keeps each stream's copies; --replicas is for creating the stores: one or the other");
        const client = await MusterClient.connect({ brokers: b.servers, collective: cfg.collective, name: o.rebuild ? "muster-broker-rebuild" : "muster-broker-stores", tls: b.tls, from: b.from });
        if (o.rebuild) {
          try {
            const done = await client.rebuildMember(o.rebuild, { ...(o.stream ? { streams: o.stream } : {}), progress: (l) => process.stderr.write(`${l}\n`) });
            process.stdout.write(o.json ? `${JSON.stringify(done)}\n` : done.map((r) => `${r.stream}: ${r.outcome === "rebuilt" ? `rebuilt in ${((r.ms ?? 0) / 1000).toFixed(1)} s, ${r.detail}` : `skipped, ${r.detail}`}\n`).join(""));
          } finally {
            await client.close();
          }
          return;
        }
        try {
          const made = await ensureFleetStores(client, { ...(o.replicas ? { replicas: o.replicas } : {}) });
          process.stdout.write(o.json ? `${JSON.stringify(made)}\n` : made.map((m) => `${m.kind} ${m.name}: ${m.created ? "created" : "already there"}\n`).join(""));
        } finally {
          await client.close();
        }
      }),
  );
  return broker;
}
