import { existsSync, readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { MusterError } from "../errors.js";

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
