import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { loadConfigFile } from "./load.js";
import { MusterError } from "../errors.js";
import { AgentPolicySchema, type AgentPolicy } from "../security/policy.js";

// Policies as files: <policy_dir>/<agent>.yaml (or .yml, .json), each `{default?, rules: [...]}`,
// so configuration management can drop one file per agent. An agent may have a policy inline in
// the server config or in the directory, not both.

const FILE = /^([a-z][a-z0-9_]*)\.(ya?ml|json)$/;

/** Reads every policy file of `dir`; a missing directory has none. Errors name the file and field. */
export function readPolicyDir(dir: string): Record<string, AgentPolicy> {
  if (!existsSync(dir)) return {};
  if (!statSync(dir).isDirectory()) throw new MusterError("MUSTER_CONFIG_INVALID", `policy_dir ${dir} is not a directory`);
  const out: Record<string, AgentPolicy> = {};
  for (const name of readdirSync(dir).sort()) {
    const m = FILE.exec(name);
    if (!m) continue;
    const agent = m[1]!;
    if (Object.hasOwn(out, agent)) throw new MusterError("MUSTER_CONFIG_INVALID", `policy_dir ${dir} has two policy files for agent '${agent}'`);
    out[agent] = loadConfigFile(join(dir, name), AgentPolicySchema, `policy for agent '${agent}'`);
  }
  return out;
}

/** Inline policies merged with the directory's; the same agent in both is a config error. */
export function mergePolicies(inline: Record<string, AgentPolicy>, dir: string | undefined): Record<string, AgentPolicy> {
  if (!dir) return inline;
  const files = readPolicyDir(dir);
  for (const agent of Object.keys(files)) {
    if (Object.hasOwn(inline, agent)) throw new MusterError("MUSTER_CONFIG_INVALID", `agent '${agent}' has a policy both in the server config (policies.${agent}) and in ${dir}; keep one`);
  }
  return { ...inline, ...files };
}
