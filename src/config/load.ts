import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { z } from "zod";
import { MusterError } from "../errors.js";

// yaml (about 20 ms to load) loads when a file is read, not when a command that may read one starts:
// `muster find` with MUSTER_BROKER set and no client config reads none (npm run bench:cli). yaml's
// Node entry is CommonJS, so require() gets the very module `import "yaml"` gets elsewhere.
const require = createRequire(import.meta.url);
const parseYaml = (text: string): unknown => (require("yaml") as typeof import("yaml")).parse(text);

/** Parse a YAML/JSON file and validate it with a zod schema; errors name the file and the field. */
export function loadConfigFile<S extends z.ZodType>(path: string, schema: S, what: string): z.output<S> {
  if (!existsSync(path)) throw new MusterError("MUSTER_CONFIG_NOT_FOUND", `${what} ${path} does not exist`);
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(path, "utf8")) ?? {};
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `${what} ${path} is not valid YAML: ${(e as Error).message}`);
  }
  return validateConfig(raw, schema, `${what} ${path}`);
}

export function validateConfig<S extends z.ZodType>(raw: unknown, schema: S, where: string): z.output<S> {
  const r = schema.safeParse(raw);
  if (!r.success) {
    const lines = r.error.issues.map((i) => `  ${i.path.length ? i.path.join(".") : "(top level)"}: ${i.message}`);
    throw new MusterError("MUSTER_CONFIG_INVALID", `${where} is invalid:\n${lines.join("\n")}`);
  }
  return r.data;
}
