// A Puppet master's address as puppet.conf's `server` and --server take it: a host name or an
// IPv4/IPv6 address, never anything Puppet could read as an option. Pure; the privileged helper's
// argument rules and runonce's `server` input both use it.

/** A host name (RFC 1123 labels) or an IP address. */
export const HOST_RE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$|^[0-9A-Fa-f:.]+$/;

export function isHost(s: string): boolean {
  return s.length <= 253 && HOST_RE.test(s);
}

export function isPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
}

/** `host[:port]` as runonce's `server` input gives it, or undefined when it is not one. */
export function parseServer(s: string): { host: string; port: number | undefined } | undefined {
  const m = /^([^:]+)(?::(\d{1,5}))?$/.exec(s);
  if (!m || !isHost(m[1]!)) return undefined;
  const p = m[2] === undefined ? undefined : Number(m[2]);
  if (p !== undefined && !isPort(p)) return undefined;
  return { host: m[1]!, port: p };
}
