import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseDataDDL, type DataPluginDDL } from "../ddl/data.js";
import { MusterError } from "../errors.js";
import type { DataPluginCatalogue, DataPluginShape } from "../filter/index.js";

// The data plugins a client knows: the built-in ones (declared here; test/filter/data-plugins.test.ts
// holds each declaration to what the plugin really returns) and, for plugins of your own, DDLs in
// `<ddl directory>/data/<name>.json` under the client config's ddl_directories.

export const builtinDataDDLs: ReadonlyMap<string, DataPluginDDL> = new Map<string, DataPluginDDL>([
  [
    "fact",
    {
      metadata: { name: "fact", description: "A fact's value by name or dotted path: fact('os.family').value" },
      query: { description: "The fact's name or dotted path", optional: false },
      output: { value: { description: "The fact's value (a structured fact: a path below it, value.x)", type: "any" } },
    },
  ],
  [
    "agent",
    {
      metadata: { name: "agent", description: "An agent's presence and metadata: agent('puppet').present" },
      query: { description: "The agent's name", optional: false },
      output: {
        present: { description: "The node hosts the agent (and it is active)", type: "boolean" },
        name: { description: "The agent's name", type: "string" },
        version: { description: "The agent's DDL version, null when the node has no such agent", type: "string" },
        description: { description: "The agent's DDL description", type: "string" },
        timeout: { description: "The agent's DDL timeout in seconds", type: "number" },
      },
    },
  ],
  [
    "provision",
    {
      metadata: { name: "provision", description: "Provisioning state of the node (the provision agent)" },
      output: {
        locked: { description: "The deploy lock is held and unexpired", type: "boolean" },
        disabled: { description: "Provisioning is finished (disabled)", type: "boolean" },
      },
    },
  ],
  [
    "puppet",
    {
      metadata: { name: "puppet", description: "The Puppet agent's state (the puppet agent)" },
      output: {
        enabled: { description: "Puppet is not disabled", type: "boolean" },
        disabled: { description: "Puppet is disabled", type: "boolean" },
        applying: { description: "A catalog run is in progress", type: "boolean" },
        idling: { description: "The Puppet daemon is idling", type: "boolean" },
        daemon_present: { description: "The Puppet daemon runs", type: "boolean" },
        status: { description: "disabled, applying a catalog, splaying, idling or stopped", type: "string" },
        lastrun: { description: "When the last run ended (seconds since epoch)", type: "integer" },
        since_lastrun: { description: "Seconds since the last run, -1 when unknown", type: "integer" },
        disable_message: { description: "Why Puppet is disabled", type: "string" },
        disabled_message: { description: "Why Puppet is disabled (MCollective's spelling)", type: "string" },
        total_resources: { description: "Resources in the last run", type: "integer" },
        changed_resources: { description: "Resources changed by the last run", type: "integer" },
        failed_resources: { description: "Resources failed in the last run", type: "integer" },
        total_time: { description: "Duration of the last run, seconds", type: "number" },
        config_version: { description: "The catalog version of the last run", type: "string" },
        last_run_status: { description: "How the last run went: failed, changed or unchanged (empty before any run)", type: "string" },
        disabled_since: { description: "When Puppet was disabled (ms since epoch), 0 when enabled", type: "integer" },
        runinterval: { description: "Seconds between the agent's runs (puppet.conf's runinterval, Puppet's 1800 when unset)", type: "integer" },
      },
    },
  ],
]);

/** Where a data plugin's DDL lives in a DDL directory. */
export function dataDDLPath(directory: string, name: string): string {
  return join(directory, "data", `${name}.json`);
}

function shapeOf(ddl: DataPluginDDL): DataPluginShape {
  return { fields: Object.keys(ddl.output), argumentRequired: ddl.query !== undefined && !ddl.query.optional };
}

function readDataDDL(path: string, name: string): DataPluginDDL {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new MusterError("MUSTER_DDL_INVALID", `${path}: cannot read data plugin DDL: ${(e as Error).message}`, { cause: e });
  }
  const ddl = parseDataDDL(json, path);
  if (ddl.metadata.name !== name) throw new MusterError("MUSTER_DDL_INVALID", `${path}: names data plugin '${ddl.metadata.name}' but the file is ${name}.json`);
  return ddl;
}

/**
 * The client's catalogue: built-ins, then `<dir>/data/<name>.json` in each of `directories`, read
 * only when a filter names a plugin that is not built in (most filters never touch the disk).
 */
export function dataPluginCatalogue(directories: readonly string[]): DataPluginCatalogue {
  const found = new Map<string, DataPluginDDL | undefined>();
  const find = (name: string): DataPluginDDL | undefined => {
    const builtin = builtinDataDDLs.get(name);
    if (builtin) return builtin;
    if (!found.has(name)) {
      const dir = directories.find((d) => existsSync(dataDDLPath(d, name)));
      found.set(name, dir === undefined ? undefined : readDataDDL(dataDDLPath(dir, name), name));
    }
    return found.get(name);
  };
  return {
    lookup: (name) => {
      const ddl = find(name);
      return ddl && shapeOf(ddl);
    },
    names: () => {
      const all = new Set(builtinDataDDLs.keys());
      for (const d of directories) {
        const dir = join(d, "data");
        if (existsSync(dir)) for (const f of readdirSync(dir)) if (f.endsWith(".json")) all.add(f.slice(0, -5));
      }
      return [...all].sort();
    },
    hint:
      directories.length > 0
        ? `declare another in ${dataDDLPath(directories[0]!, "NAME")}`
        : "declare another as data/NAME.json in a ddl_directories entry of the client config",
  };
}
