import type { NodeAgentsConfig } from "../agent/catalogue.js";
import type { PuppetAgentSettings } from "../puppet/agent.js";

// What the node daemon asks the agents about its node, so that it never reads their settings or
// files itself: where the node's own Puppet lives (the classes file it follows, the certificate a
// provisioned node connects with) and whether the provision agent has finished. The daemon learns
// of the moment provisioning finishes through the provision agent's `onProvisioned` hook
// (AgentDeps). Loaded lazily, like the agents, to keep an idle server small.

/** The daemon's view of the node's Puppet: where it lives (shared settings, agents/settings.ts), not which master it runs against. */
async function where(conf: Record<string, unknown>, agent: string, identity: string): Promise<PuppetAgentSettings> {
  const { settingsReader, puppetNodeSettings, puppetAgentSettings } = await import("./settings.js");
  const { server: _server, serverport: _port, ...rest } = puppetAgentSettings(puppetNodeSettings(settingsReader(agent, conf), identity));
  return rest;
}

/**
 * Where the node's own Puppet lives, as its puppet and provision agents see it (plugins.provision
 * over plugins.puppet, the settings both share), or undefined when the node runs neither agent and
 * configures neither. A bad setting throws, naming it.
 */
export async function nodePuppet(c: NodeAgentsConfig): Promise<PuppetAgentSettings | undefined> {
  const hasPuppet = c.plugins.puppet || c.plugins.provision || (c.builtin ?? []).some((a) => a === "puppet" || a === "provision") || c.provisioning;
  if (!hasPuppet) return undefined;
  return where({ ...(c.plugins.puppet ?? {}), ...(c.plugins.provision ?? {}) }, c.plugins.provision ? "provision" : "puppet", c.identity);
}

/** nodePuppet, or Puppet's defaults for the node when it configures none. */
export async function nodePuppetOrDefaults(c: NodeAgentsConfig): Promise<PuppetAgentSettings> {
  const configured = await nodePuppet(c);
  if (configured) return configured;
  return where({}, "puppet", c.identity);
}

/** Whether the node's provision agent has finished provisioning it (before or since a restart). */
export async function isProvisioned(c: NodeAgentsConfig): Promise<boolean> {
  const { isProvisioned } = await import("./provision/index.js");
  return isProvisioned(c.plugins.provision ?? {}, c.identity);
}
