import { InvalidArgumentError, Option, type Command } from "commander";
import type { MusterClient } from "../client/client.js";
import type { NodeSource } from "../client/discovery/source.js";
import type { ClientConfig } from "./config.js";
import type { FilterOpts } from "./opts.js";
import type { Session } from "./session.js";

export type { Session } from "./session.js";
export type { CommonOpts, FilterOpts, RpcOpts } from "./opts.js";

// Options shared by every command that talks to the collective, with mco/choria's spellings.

const collect = (v: string, prev: string[] = []) => [...prev, v];

// Commander's own error type: a bad value is a usage error of the command that parses it, so
// `muster nrpe` can answer it as UNKNOWN like any other (main.ts exits 64 for the rest).
const positiveNumber = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${name} takes a positive number.`);
  return n;
};
const positiveInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`${name} takes a positive whole number.`);
  return n;
};

export function addCommonOptions(cmd: Command): Command {
  return cmd
    .option("--broker <url>", "NATS broker URL(s), comma-separated (default: $MUSTER_BROKER, the client config, nats://127.0.0.1:4222)")
    .option("--config <file>", "client config file (default: $MUSTER_CONFIG, ./.muster/client.yaml, ~/.config/muster/client.yaml)")
    .option("-T, --target <collective>", "collective to address")
    .option("--json", "print machine-readable JSON");
}

export function addFilterOptions(cmd: Command): Command {
  return addFilterFlags(addCommonOptions(cmd))
    .option("--dt <seconds>", "discovery timeout (upper bound; broadcast ends sooner once replies stop)", positiveNumber("--dt"))
    .addOption(new Option("--dm <method>", "discovery method (default: discovery_method in the client config, else broadcast)").choices(["broadcast", "mc", "flatfile", "file", "registry", "puppetdb"]))
    .option("--nodes <file>", "identities, one per line (implies --dm flatfile)");
}

/** -F -C -I -A -W -S alone (commands that filter without discovering, e.g. `registry query`). */
export function addFilterFlags(cmd: Command): Command {
  return cmd
    .option("-F, --wf <fact>", "fact filter: fact=value, fact>=3, fact=~/re/ (repeatable, ANDed)", collect)
    .option("-C, --wc <class>", "Puppet class filter, exact or /regex/ (repeatable, ANDed)", collect)
    .option("-I, --wi <identity>", "identity filter, exact or /regex/ (repeatable, ORed)", collect)
    .option("-A, --wa <agent>", "agent filter (repeatable, ANDed)", collect)
    .option("-W, --with <filter>", "mixed filter: each word a fact filter if it parses as one, else a class", collect)
    .option("-S, --select <expr>", "compound filter: \"country=de and (web or /db/) and provision().locked=false\"", collect);
}

export function addRpcOptions(cmd: Command): Command {
  return addFilterOptions(cmd)
    .option("--batch <n>", "address nodes in batches of N", positiveInt("--batch"))
    .option("--batch-sleep <seconds>", "pause between batches", positiveNumber("--batch-sleep"))
    .option("--limit <n>", "call only N nodes or N% of the discovered ones")
    .addOption(new Option("--limit-method <method>", "which nodes --limit keeps").choices(["first", "random"]).default("first"))
    .option("--limit-seed <n>", "seed for --limit-method random (reproducible selections)", positiveInt("--limit-seed"))
    .addOption(new Option("--display <which>", "which replies to print").choices(["ok", "failed", "all"]))
    .option("--timeout <seconds>", "how long to wait for replies (default: the action's DDL timeout)", positiveNumber("--timeout"))
    .option("--no-progress", "no progress bar");
}

/**
 * Check the filters first (nothing is sent when they are bad), then connect. The client, the
 * filter language and the config load here, when a command runs, not for its --help (session.ts).
 */
export async function openSession(o: FilterOpts, registrySource?: (client: MusterClient, cfg: ClientConfig) => NodeSource): Promise<Session> {
  return (await import("./session.js")).openSession(o, registrySource);
}
