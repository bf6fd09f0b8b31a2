// Colours and plain values for terminal output, with no imports: a command's top level (what its
// `--help` loads) may use them without loading the RPC renderers (output.ts).

const useColor = () => process.stdout.isTTY && !process.env.NO_COLOR;
export const red = (s: string) => (useColor() ? `\x1b[31m${s}\x1b[0m` : s);
export const green = (s: string) => (useColor() ? `\x1b[32m${s}\x1b[0m` : s);
export const yellow = (s: string) => (useColor() ? `\x1b[33m${s}\x1b[0m` : s);
export const bold = (s: string) => (useColor() ? `\x1b[1m${s}\x1b[0m` : s);

/** How a reply whose sender could not be proven is marked in human output (docs/security.md, "Verifying replies"). */
export const UNVERIFIED = "(unverified)";

/** " (unverified)" for the senders listed as unverified, "" for the rest. */
export function unverifiedMark(unverified: readonly string[]): (sender: string) => string {
  const set = new Set(unverified);
  return (sender) => (set.has(sender) ? ` ${UNVERIFIED}` : "");
}

export function formatValue(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return JSON.stringify(v, null, 2).replace(/\n/g, "\n      ");
}
