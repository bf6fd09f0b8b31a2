import type { Command } from "commander";

/** One subcommand as `muster --help` lists it, and how to load its definition. */
export interface CommandEntry {
  /** What follows the name in the `Commands:` list: `[options]` when it has options, then its arguments. */
  usage: string;
  /** The command's `.description()`, word for word. */
  description: string;
  load: () => Promise<() => Command>;
}

// Every subcommand, listed explicitly (no registration by import side effects), in `--help` order.
// Each loads on demand: `muster find` loads find.ts alone, and a command module keeps its heavy
// imports (NATS, zod, pino...) inside its actions, so `muster <command> --help` costs a start-up
// and no more (npm run bench:cli; test/cli/help.test.ts holds every --help to it).
// `muster --help` lists the commands from `usage` and `description` without loading any module.
// The command modules stay the definitions: test/cli/command-index.test.ts fails when an entry
// here no longer says what its module declares, and help.test.ts pins the whole text.
export const commands: Record<string, CommandEntry> = {
  server: {
    usage: "[options]",
    description: "Run the node daemon: host agents, answer discovery and RPC, publish registration",
    load: async () => (await import("./server.js")).serverCommand,
  },
  ping: {
    usage: "[options]",
    description: "Broadcast a ping; every matching node answers with its round-trip time",
    load: async () => (await import("./ping.js")).pingCommand,
  },
  find: {
    usage: "[options]",
    description: "Print the identities of the nodes matching the filters, sorted, one per line",
    load: async () => (await import("./find.js")).findCommand,
  },
  health: {
    usage: "[options]",
    description: "The site's health: its services (brokers, masters, provisioners, registry, console, notifier), then its nodes (unreachable, Puppet failed, stale or disabled, provisioning failed or gone), each with why",
    load: async () => (await import("./health.js")).healthCommand,
  },
  alerts: {
    usage: "[options]",
    description: "The admins' alerts: whether they arrive, what is open, silenced nodes, history; acknowledge, silence, test",
    load: async () => (await import("./alerts.js")).alertsCommand,
  },
  inventory: {
    usage: "[options] <identity>",
    description: "Everything one node knows about itself: agents, facts, classes, collectives, data plugins",
    load: async () => (await import("./inventory.js")).inventoryCommand,
  },
  facts: {
    usage: "[options] <fact>",
    description: "Show how a fact's values are distributed across the matching nodes",
    load: async () => (await import("./facts.js")).factsCommand,
  },
  rpc: {
    usage: "[options] <agent> [action] [inputs...]",
    description: "Call any agent action on the matching nodes: muster rpc AGENT ACTION [key=value ...]",
    load: async () => (await import("./rpc.js")).rpcCommand,
  },
  emulate: {
    usage: "[options]",
    description: "Host many virtual nodes in one process (for trying muster and for benchmarks)",
    load: async () => (await import("./emulate.js")).emulateCommand,
  },
  provisioner: {
    usage: "[options]",
    description: "Run the provisioning daemon: take waiting nodes to their production Puppet state",
    load: async () => (await import("./provisioner.js")).provisionerCommand,
  },
  provision: {
    usage: "",
    description: "Inspect and steer provisioning: status, retry",
    load: async () => (await import("./provision.js")).provisionCommand,
  },
  decommission: {
    usage: "[options] <identity...>",
    description: "Take nodes out of the fleet for good: revoke and clean their certificates on every master, deactivate them in PuppetDB, drop their registry and provisioning records, tell the admins",
    load: async () => (await import("./decommission.js")).decommissionCommand,
  },
  lab: {
    usage: "",
    description: "A local fleet on loopback: broker, two real puppetservers, nodes, notifier and provisioner",
    load: async () => (await import("./lab.js")).labCommand,
  },
  ssh: {
    usage: "[options] [ssh-args...]",
    description: "SSH to the node matching the filters (a menu when several match)",
    load: async () => (await import("./ssh.js")).sshCommand,
  },
  nrpe: {
    usage: "[options] <command> [args...]",
    description: "Run an NRPE check on every matching node and print one Nagios result: summary line with perfdata, then the hosts not OK",
    load: async () => (await import("./nrpe.js")).nrpeCommand,
  },
  resource: {
    usage: "[options] <type> <name> [properties...]",
    description: "Apply a Puppet resource with the real `puppet resource` on every matching node (no properties: show its state)",
    load: async () => (await import("./resource.js")).resourceCommand,
  },
  registry: {
    usage: "",
    description: "Node registry: every node's registration data in NATS KV, for --dm registry and queries",
    load: async () => (await import("./registry.js")).registryCommand,
  },
  puppet: {
    usage: "",
    description: "Puppet across the fleet: runall with capped concurrency, runonce, status, summary, count, enable, disable",
    load: async () => (await import("./puppet.js")).puppetCommand,
  },
  broker: {
    usage: "",
    description: "nats-server configuration for a muster fleet (users and permissions, bootstrap credentials, the stores nodes write to)",
    load: async () => (await import("./broker.js")).brokerCommand,
  },
  ca: {
    usage: "",
    description: "The site's CA: make it, and issue the brokers' and services' certificates (X.509 v3, with the extensions TLS checks)",
    load: async () => (await import("./ca.js")).caCommand,
  },
  client: {
    usage: "",
    description: "This workstation as a client of a site: its client config, broker credential and signing key",
    load: async () => (await import("./client.js")).clientCommand,
  },
  key: {
    usage: "",
    description: "Signing keys: make one for a service (the provisioners' shared key) before rendering the machines that trust it",
    load: async () => (await import("./key.js")).keyCommand,
  },
  "user-data": {
    usage: "[flags...]",
    description: "Print cloud-init user-data for a machine of the site: a node waiting to be provisioned (default), or --role broker|master|provisioner|console",
    load: async () => (await import("./user-data.js")).userDataCommand,
  },
  doctor: {
    usage: "[options]",
    description: "Check what commands need: config and broker, TLS files and handshake, connection, signing key, discovery, and whether nodes trust the key",
    load: async () => (await import("./doctor.js")).doctorCommand,
  },
  web: {
    usage: "[options]",
    description: "Serve the web console: the fleet's health, the provisioning board, the fleet explorer, node pages and runall",
    load: async () => (await import("./web.js")).webCommand,
  },
  privileged: {
    usage: "",
    description: "The node daemon's privileged helper: the few operations muster server may ask root for",
    load: async () => (await import("./privileged.js")).privilegedCommand,
  },
};
