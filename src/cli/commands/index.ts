import type { Command } from "commander";

// Every subcommand, listed explicitly (no registration by import side effects), in `--help` order.
// Each loads on demand: `muster find` loads find.ts alone, and a command module keeps its heavy
// imports (NATS, zod, pino...) inside its actions, so `muster <command> --help` costs a start-up
// and no more (npm run bench:cli; test/cli/help.test.ts holds every --help to it).
export const commands: Record<string, () => Promise<() => Command>> = {
  server: async () => (await import("./server.js")).serverCommand,
  ping: async () => (await import("./ping.js")).pingCommand,
  find: async () => (await import("./find.js")).findCommand,
  inventory: async () => (await import("./inventory.js")).inventoryCommand,
  facts: async () => (await import("./facts.js")).factsCommand,
  rpc: async () => (await import("./rpc.js")).rpcCommand,
  emulate: async () => (await import("./emulate.js")).emulateCommand,
  provisioner: async () => (await import("./provisioner.js")).provisionerCommand,
  provision: async () => (await import("./provision.js")).provisionCommand,
  decommission: async () => (await import("./decommission.js")).decommissionCommand,
  lab: async () => (await import("./lab.js")).labCommand,
  ssh: async () => (await import("./ssh.js")).sshCommand,
  nrpe: async () => (await import("./nrpe.js")).nrpeCommand,
  resource: async () => (await import("./resource.js")).resourceCommand,
  registry: async () => (await import("./registry.js")).registryCommand,
  puppet: async () => (await import("./puppet.js")).puppetCommand,
  broker: async () => (await import("./broker.js")).brokerCommand,
  doctor: async () => (await import("./doctor.js")).doctorCommand,
  web: async () => (await import("./web.js")).webCommand,
};
