import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { DEFAULT_RUNINTERVAL_S } from "../protocol/puppet-run.js";

// puppet.conf is INI: `[section]` headers and `key = value` lines. We change only the keys we
// are asked to, in place, and keep every other line (comments, order, other sections) as is.

/** Set keys in one section of INI text; `undefined` removes a key. Returns the new text. */
export function setIniSettings(text: string, section: string, settings: Record<string, string | number | undefined>): string {
  const lines = text.length ? text.replace(/\r\n/g, "\n").split("\n") : [];
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  for (const [k, v] of Object.entries(settings)) {
    if (!/^[A-Za-z0-9_]+$/.test(k) || /[\r\n]/.test(String(v ?? ""))) throw new Error(`refusing to write puppet.conf setting ${JSON.stringify(k)}: names are [A-Za-z0-9_]+ and values are one line`);
  }
  const pending = new Map(Object.entries(settings));
  let current = "main"; // puppet treats keys before any header as [main]
  let explicit = false; // inside a `[section]` we saw, rather than the header-less start
  let sectionEnd = -1; // where to add keys the section does not have yet
  const out: string[] = [];
  for (const line of lines) {
    const header = /^\s*\[([^\]]+)\]\s*$/.exec(line);
    if (header?.[1]) {
      current = header[1].trim();
      explicit = true;
      out.push(line);
      if (current === section) sectionEnd = out.length;
      continue;
    }
    if (current !== section) {
      out.push(line);
      continue;
    }
    const key = /^\s*([A-Za-z0-9_]+)\s*=/.exec(line)?.[1];
    if (key !== undefined && pending.has(key)) {
      const v = pending.get(key);
      pending.delete(key);
      if (v === undefined) continue;
      out.push(`${key} = ${v}`);
      sectionEnd = out.length;
      continue;
    }
    out.push(line);
    if (key !== undefined || (explicit && line.trim() !== "")) sectionEnd = out.length;
  }
  const additions = [...pending].filter(([, v]) => v !== undefined).map(([k, v]) => `${k} = ${v}`);
  if (additions.length) {
    if (sectionEnd >= 0) out.splice(sectionEnd, 0, ...additions);
    else {
      if (out.length && out[out.length - 1]!.trim() !== "") out.push("");
      out.push(`[${section}]`, ...additions);
    }
  }
  return out.join("\n") + "\n";
}

/** Read an INI section's keys (last wins). Keys before any header belong to [main]. */
export function readIniSection(text: string, section: string): Record<string, string> {
  let current = "main";
  const out: Record<string, string> = {};
  for (const line of text.replace(/\r\n/g, "\n").split("\n")) {
    const header = /^\s*\[([^\]]+)\]\s*$/.exec(line);
    if (header?.[1]) {
      current = header[1].trim();
      continue;
    }
    if (current !== section) continue;
    const kv = /^\s*([A-Za-z0-9_]+)\s*=\s*(.*?)\s*$/.exec(line);
    if (kv?.[1] !== undefined) out[kv[1]] = kv[2] ?? "";
  }
  return out;
}

/** Update a puppet.conf file in place (atomically), creating it when missing. */
export function updatePuppetConf(path: string, section: string, settings: Record<string, string | number | undefined>): void {
  const before = existsSync(path) ? readFileSync(path, "utf8") : "";
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.muster-${process.pid}.tmp`;
  writeFileSync(tmp, setIniSettings(before, section, settings));
  renameSync(tmp, path);
}

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, y: 31_536_000 };

/**
 * The agent's `runinterval` in seconds from puppet.conf's text ([agent] over [main]), in Puppet's
 * duration syntax ("1800", "30m", "2h", "1d"); Puppet's default when unset, unreadable or 0 (0 runs
 * continuously and says nothing of when a run is late).
 */
export function runIntervalOf(text: string | null | undefined): number {
  if (!text) return DEFAULT_RUNINTERVAL_S;
  const v = readIniSection(text, "agent").runinterval ?? readIniSection(text, "main").runinterval;
  const m = v === undefined ? null : /^(\d+)\s*([smhdy]?)$/.exec(v.trim());
  const seconds = m ? Number(m[1]) * DURATION_UNITS[m[2] || "s"]! : 0;
  return seconds > 0 && Number.isSafeInteger(seconds) ? seconds : DEFAULT_RUNINTERVAL_S;
}

/** The agent's `runinterval` from the puppet.conf in `confdir` (Puppet's default when there is none to read). */
export function readRunInterval(confdir: string): number {
  try {
    return runIntervalOf(readFileSync(join(confdir, "puppet.conf"), "utf8"));
  } catch {
    return DEFAULT_RUNINTERVAL_S;
  }
}
