import { readFileSync } from "node:fs";
import { MusterError } from "../../errors.js";
import { isValidIdentity } from "../../protocol/subjects.js";
import type { Filter } from "../../protocol/types.js";
import type { NodeSource } from "./source.js";

// --dm flatfile --nodes FILE: one identity per line (# comments). Only identity filters apply here;
// the rest travel with the request and the nodes evaluate them.

export function readNodesFile(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_NOT_FOUND", `cannot read nodes file ${path}: ${(e as Error).message}`);
  }
  const out: string[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.replace(/#.*/, "").trim();
    if (!line) return;
    if (!isValidIdentity(line)) throw new MusterError("MUSTER_USAGE", `${path}:${i + 1}: ${JSON.stringify(line)} is not a valid identity`);
    out.push(line);
  });
  return [...new Set(out)].sort();
}

function identityMatches(patterns: string[], id: string): boolean {
  if (patterns.length === 0) return true;
  return patterns.some((p) => (p.length > 1 && p.startsWith("/") && p.endsWith("/") ? new RegExp(p.slice(1, -1)).test(id) : p === id));
}

export class FlatfileSource implements NodeSource {
  readonly name = "flatfile";
  readonly partial = true;
  constructor(private readonly path: string) {}
  async discover(filter: Filter): Promise<string[]> {
    return readNodesFile(this.path).filter((id) => identityMatches(filter.identity, id));
  }
}
