import type { NodeSettings } from "../privileged/settings.js";
import { nodePuppetOrDefaults } from "./node.js";
import { puppetAgentFor as provisionPuppet, resolveSettings as resolveProvisionSettings } from "./provision/state.js";
import { puppetAgentFor as puppetPuppet, resolveSettings as resolvePuppetSettings } from "./puppet/settings.js";
import { resolveResourceSettings } from "./resource/settings.js";

// The privileged helper's view of its node (src/privileged/settings.ts), read from root's server
// config with the very readers the agents use, so root and the daemon mean the same by every
// setting. `muster privileged serve` hands this to the helper; the helper imports no agent.

/** The parts of a loaded server config (src/server/config.ts) the helper reads. */
export interface ServerConfigParts {
  identity: string;
  agents: { builtin?: readonly string[] };
  provisioning?: unknown;
  plugins: Record<string, Record<string, unknown>>;
  tls?: { use_puppet_cert?: boolean };
  facts: { facter: boolean; facter_command: string };
}

export function helperSettings(source: string, cfg: ServerConfigParts): NodeSettings {
  const agents = new Set(cfg.agents.builtin ?? []);
  if (cfg.provisioning) agents.add("provision");
  const plugin = (name: string) => cfg.plugins[name] ?? {};
  return {
    source,
    identity: cfg.identity,
    agents,
    usePuppetCert: !!cfg.tls?.use_puppet_cert,
    facts: { enabled: cfg.facts.facter, facterCommand: cfg.facts.facter_command },
    puppet(agent) {
      if (agent === "provision") {
        const s = resolveProvisionSettings(plugin("provision"), cfg.identity);
        return { settings: provisionPuppet(s).settings, runTimeoutMs: s.runTimeoutSeconds * 1000, allowServerOverride: false };
      }
      const s = resolvePuppetSettings(plugin("puppet"), cfg.identity);
      return { settings: puppetPuppet(s).settings, runTimeoutMs: s.runTimeoutSeconds * 1000, allowServerOverride: s.allowServerOverride };
    },
    provision() {
      const s = resolveProvisionSettings(plugin("provision"), cfg.identity);
      return { stageFactFile: s.stageFactFile, stageFact: s.stageFact, useHostsFile: s.useHostsFile, hostsFile: s.hostsFile };
    },
    resource: () => resolveResourceSettings(plugin("resource")),
    nodePuppet: () => nodePuppetOrDefaults({ identity: cfg.identity, plugins: cfg.plugins, ...(cfg.agents.builtin ? { builtin: cfg.agents.builtin } : {}), provisioning: !!cfg.provisioning }),
  };
}
