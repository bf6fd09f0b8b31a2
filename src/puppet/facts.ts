// Facts handed to a Puppet run as FACTER_<name> environment variables.

const FACT_NAME = /^[A-Za-z][A-Za-z0-9_]*$/;

export function isFactName(name: string): boolean {
  return FACT_NAME.test(name);
}

/** The scalar facts among `names` (those the node daemon knows: its facts file, facter). */
export function exportedFacts(names: readonly string[], facts: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of names) {
    const v = facts[n];
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[n] = String(v);
  }
  return out;
}
