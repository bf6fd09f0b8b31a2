import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";
import { parseDDL } from "../ddl/index.js";
import type { AgentDDL } from "../ddl/types.js";
import { MusterError } from "../errors.js";
import { discoveryDDL } from "./discovery/index.js";
import { notifyDDL } from "./notify/ddl.js";
import { nrpeDDL } from "./nrpe/ddl.js";
import { provisionDDL } from "./provision/ddl.js";
import { puppetcaDDL } from "./puppetca/ddl.js";
import { resourceDDL } from "./resource/ddl.js";
import { puppetDDL } from "./puppet/ddl.js";
import { rpcutilDDL } from "./rpcutil/ddl.js";

// DDLs the client knows: the built-in agents' plus external ones from ddl directories or --ddl.
export const builtinDDLs: Record<string, AgentDDL> = {
  discovery: discoveryDDL,
  rpcutil: rpcutilDDL,
  notify: notifyDDL,
  provision: provisionDDL,
  puppetca: puppetcaDDL,
  resource: resourceDDL,
  nrpe: nrpeDDL,
  puppet: puppetDDL,
};

export function registerBuiltinDDL(ddl: AgentDDL): void {
  builtinDDLs[ddl.metadata.name] = ddl;
}

export function findDDL(agent: string, directories: string[], explicitFile?: string): AgentDDL {
  if (explicitFile) return parseDDL(JSON.parse(readFileSync(explicitFile, "utf8")) as unknown, explicitFile);
  const builtin = builtinDDLs[agent];
  if (builtin) return builtin;
  for (const dir of directories) {
    const p = join(dir, `${agent}.json`);
    if (existsSync(p)) return parseDDL(JSON.parse(readFileSync(p, "utf8")) as unknown, p);
  }
  const known = new Set(Object.keys(builtinDDLs));
  for (const dir of directories) if (existsSync(dir)) for (const f of readdirSync(dir)) if (f.endsWith(".json")) known.add(f.slice(0, -5));
  throw new MusterError("MUSTER_UNKNOWN_AGENT", `no DDL for agent '${agent}'. Known agents: ${[...known].sort().join(", ")}. Put ${agent}.json in a ddl_directories entry of the client config, or pass --ddl FILE.`);
}
