// Subject names, built in one place. Identities may contain dots (hostnames), which NATS treats as
// token separators: direct subscriptions use exact subjects, and the emulator uses `node.>`.

const TOKEN_RE = /^[A-Za-z0-9_\-]+$/;
const IDENTITY_RE = /^[A-Za-z0-9_\-.:@]+$/;
const BROADCAST_RE = /^[A-Za-z0-9_\-]+\.broadcast\.agent\./;

export function isValidCollective(name: string): boolean {
  return TOKEN_RE.test(name) && name.length <= 128;
}

export function isValidIdentity(identity: string): boolean {
  return IDENTITY_RE.test(identity) && identity.length <= 253 && !identity.startsWith(".") && !identity.endsWith(".") && !identity.includes("..");
}

export function isValidAgentName(name: string): boolean {
  return /^[a-z][a-z0-9_]*$/.test(name) && name.length <= 64;
}

export const subjects = {
  broadcast: (collective: string, agent: string) => `${collective}.broadcast.agent.${agent}`,
  node: (collective: string, identity: string) => `${collective}.node.${identity}`,
  /** Wildcard covering every node's direct subject in a collective (the emulator hosts many). */
  allNodes: (collective: string) => `${collective}.node.>`,
  registration: (collective: string) => `${collective}.registration`,
  /**
   * A registry asking every node of the collective to register now (fill on start). Nodes answer
   * with a registration after a short random splay, at most once per SOLICIT_MIN_GAP_MS.
   */
  registrationSolicit: (collective: string) => `${collective}.registration.solicit`,
  /** Queries answered by `muster registry serve` from its in-memory copy of the bucket. */
  registryQuery: (bucket: string) => `muster.registry.${bucket}.query`,
  /** PuppetDB read through the registry daemon (protocol/puppetdb.ts): the registry is the PuppetDB client. */
  registryPuppetDb: (bucket: string) => `muster.registry.${bucket}.puppetdb`,
  lifecycle: (event: string, component: string) => `muster.lifecycle.${event}.${component}`,
  allLifecycle: () => "muster.lifecycle.>",
  /** Events agents publish about their node (ActionContext.emit). */
  event: (agent: string, event: string) => `muster.event.${agent}.${event}`,
  /** Whether the subject is a broadcast subject (`<collective>.broadcast.agent.<agent>`). */
  isBroadcast(subject: string): boolean {
    return BROADCAST_RE.test(subject);
  },
  /** The identity named by a direct subject, or undefined when the subject is not one. */
  identityOf(collective: string, subject: string): string | undefined {
    const prefix = `${collective}.node.`;
    return subject.startsWith(prefix) ? subject.slice(prefix.length) : undefined;
  },
} as const;
