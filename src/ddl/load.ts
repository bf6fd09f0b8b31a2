import { readFile } from "node:fs/promises";
import { z } from "zod";
import { MusterError } from "../errors.js";
import type { AgentDDL } from "./types.js";
import { inputProblem, validationProblem } from "./validate.js";

// External agents ship their DDL as JSON. Built-in DDLs are checked by the compiler; these are
// checked here, once, at load time, so a bad DDL is reported with its file and field instead
// of failing later on some request.

// Agent names end up in NATS subjects: no dots, wildcards or spaces.
const AGENT_NAME = /^[a-z][a-z0-9_]*$/;
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

const identKey = z.string().regex(IDENT, "must be a word of letters, digits and underscores");

// zod builds records with a null prototype; hand callers ordinary objects.
function record<T extends z.ZodType>(value: T) {
  return z.record(identKey, value).transform((r) => Object.fromEntries(Object.entries(r)) as Record<string, z.output<T>>);
}

const inputSchema = z.strictObject({
  prompt: z.string().optional(),
  description: z.string(),
  type: z.enum(["string", "integer", "float", "number", "boolean", "list", "hash", "array"]),
  optional: z.boolean(),
  default: z.unknown().optional(),
  validation: z.string().optional(),
  maxlength: z.number().int().min(0).optional(),
  list: z.array(z.union([z.string(), z.number(), z.boolean()])).min(1).optional(),
});

const outputSchema = z.strictObject({
  description: z.string(),
  display_as: z.string(),
  default: z.unknown().optional(),
  type: z.enum(["string", "integer", "float", "number", "boolean", "hash", "array", "any"]).optional(),
});

const aggregateSchema = z.strictObject({
  function: z.enum(["summary", "average", "sum", "boolean_summary"]),
  output: z.string(),
  format: z.string().optional(),
});

const actionSchema = z
  .strictObject({
    description: z.string(),
    display: z.enum(["ok", "failed", "always"]).optional(),
    readonly: z.boolean().optional(),
    input: record(inputSchema).default({}),
    output: record(outputSchema).default({}),
    aggregate: z.array(aggregateSchema).optional(),
  })
  .superRefine((action, ctx) => {
    // Rules that span fields: zod reports them with the same path style as shape errors.
    for (const [name, input] of Object.entries(action.input)) {
      if (input.type === "list" && input.list === undefined) {
        ctx.addIssue({ code: "custom", path: ["input", name, "list"], message: "a list input needs its allowed values in 'list'" });
      }
      const bad = input.validation === undefined ? undefined : validationProblem(input.validation);
      if (bad) ctx.addIssue({ code: "custom", path: ["input", name, "validation"], message: bad });
      // A default that would fail validation would be sent to every node unchecked.
      if (!bad && input.default !== undefined && input.default !== null) {
        const problem = inputProblem(name, input, input.default);
        if (problem) ctx.addIssue({ code: "custom", path: ["input", name, "default"], message: `default does not fit: ${problem.message}` });
      }
    }
    (action.aggregate ?? []).forEach((agg, i) => {
      if (!Object.hasOwn(action.output, agg.output)) {
        ctx.addIssue({ code: "custom", path: ["aggregate", i, "output"], message: `aggregate names output '${agg.output}', which the action does not declare` });
      }
    });
  });

const ddlSchema = z.strictObject({
  $schema: z.string().optional(),
  metadata: z.strictObject({
    name: z.string().regex(AGENT_NAME, "must be lower case letters, digits and underscores, starting with a letter"),
    description: z.string(),
    author: z.string().optional(),
    license: z.string().optional(),
    version: z.string().min(1),
    url: z.string().optional(),
    timeout: z.number().positive(),
  }),
  actions: record(actionSchema).refine((a) => Object.keys(a).length > 0, "an agent needs at least one action"),
});

const MAX_ISSUES = 10;

/** Checks a parsed DDL JSON document; `source` (a file name) is named in errors. */
export function parseDDL(json: unknown, source = "DDL"): AgentDDL {
  const parsed = ddlSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues;
    const lines = issues.slice(0, MAX_ISSUES).map((i) => `  ${issuePath(i.path)}: ${i.message}`);
    if (issues.length > MAX_ISSUES) lines.push(`  ... and ${issues.length - MAX_ISSUES} more`);
    throw new MusterError("MUSTER_DDL_INVALID", `${source}: invalid agent DDL:\n${lines.join("\n")}`, { cause: parsed.error });
  }
  const { $schema: _schema, ...ddl } = parsed.data;
  return ddl;
}

/** Reads and checks a DDL JSON file. */
export async function loadDDLFile(path: string): Promise<AgentDDL> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    throw new MusterError("MUSTER_DDL_INVALID", `${path}: cannot read agent DDL: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new MusterError("MUSTER_DDL_INVALID", `${path}: agent DDL is not valid JSON: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  return parseDDL(json, path);
}

/** `actions.install.input.package.type`, `aggregate[0].output`; odd keys in brackets. */
function issuePath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "(document)";
  return path
    .map((p, i) => {
      if (typeof p === "number") return `[${p}]`;
      const key = String(p);
      if (IDENT.test(key) || key === "$schema") return i === 0 ? key : `.${key}`;
      return `[${JSON.stringify(key)}]`;
    })
    .join("");
}
