import { MusterError } from "../errors.js";
import { lazySchema } from "../lazy-zod.js";

// A data plugin's contract: what `name('argument').field` in a -S filter may say. The client
// checks every call against these before sending anything (docs/filters.md#data-plugins), as
// MCollective checked its data DDLs. Built-in plugins are declared in src/agents/data-ddls.ts;
// a plugin of your own ships `<ddl directory>/data/<name>.json` in this shape (choria's data DDL:
// metadata, query, output).

export interface DataQuerySpec {
  description: string;
  /** false: `name()` without an argument is refused (the plugin would answer nothing). */
  optional: boolean;
}

export interface DataOutputSpec {
  description: string;
  display_as?: string;
  type?: "string" | "integer" | "float" | "number" | "boolean" | "hash" | "array" | "any";
}

export interface DataPluginDDL {
  metadata: { name: string; description: string; version?: string; author?: string; license?: string; url?: string };
  /** The argument in `name('argument')`; absent: the plugin takes none (one given is ignored). */
  query?: DataQuerySpec;
  /** The result's fields. A filter may name one, or a dotted path below it (`stat.size`). */
  output: Record<string, DataOutputSpec>;
}

const NAME = /^[A-Za-z_]\w*$/;

// Built when a DDL of your own is read: the built-in plugins are declared, not parsed.
const schema = lazySchema((z) =>
  z.strictObject({
  $schema: z.string().optional(),
  metadata: z.strictObject({
    name: z.string().regex(NAME, "must be letters, digits and underscores, not starting with a digit"),
    description: z.string(),
    version: z.string().optional(),
    author: z.string().optional(),
    license: z.string().optional(),
    url: z.string().optional(),
    timeout: z.number().positive().optional(),
  }),
  query: z.strictObject({ description: z.string(), optional: z.boolean(), type: z.literal("string").optional(), prompt: z.string().optional() }).optional(),
  output: z
    .record(
      z.string().regex(/^\w+$/, "field names are letters, digits and underscores"),
      z.strictObject({ description: z.string(), display_as: z.string().optional(), type: z.enum(["string", "integer", "float", "number", "boolean", "hash", "array", "any"]).optional() }),
    )
    .refine((o) => Object.keys(o).length > 0, "a data plugin needs at least one output field"),
  }),
);

/** Checks a data plugin DDL (parsed JSON); `source` (a file name) is named in errors. */
export function parseDataDDL(json: unknown, source = "data DDL"): DataPluginDDL {
  const r = schema().safeParse(json);
  if (!r.success) {
    const lines = r.error.issues.slice(0, 10).map((i) => `  ${i.path.length ? i.path.join(".") : "(document)"}: ${i.message}`);
    throw new MusterError("MUSTER_DDL_INVALID", `${source}: invalid data plugin DDL:\n${lines.join("\n")}`, { cause: r.error });
  }
  const d = r.data;
  const { timeout: _timeout, ...metadata } = d.metadata;
  return { metadata, ...(d.query ? { query: { description: d.query.description, optional: d.query.optional } } : {}), output: Object.fromEntries(Object.entries(d.output)) };
}
