import type { z } from "zod";

// The keys a zod config schema accepts, and whether a parsed YAML document shows each of them, for
// test/docs/examples.test.ts: an example config that is said to list every key must, and a key added
// to a schema shows up here without anyone updating a list. Pure.

interface Def {
  type: string;
  shape?: Record<string, z.ZodType>;
  innerType?: z.ZodType;
  in?: z.ZodType;
  element?: z.ZodType;
  valueType?: z.ZodType;
  options?: z.ZodType[];
  getter?: () => z.ZodType;
}

const def = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/**
 * Every key path the schema accepts: `a.b` for nested objects, `a[].b` for objects in arrays and
 * `a.*.b` for objects in records (any key). Records of free-form values add only their own path.
 */
export function schemaKeyPaths(schema: z.ZodType, prefix = ""): string[] {
  const d = def(schema);
  switch (d.type) {
    case "optional":
    case "nullable":
    case "default":
    case "prefault":
    case "catch":
    case "readonly":
    case "nonoptional":
      return schemaKeyPaths(d.innerType!, prefix);
    case "pipe":
      return schemaKeyPaths(d.in!, prefix);
    case "lazy":
      return schemaKeyPaths(d.getter!(), prefix);
    case "array":
      return schemaKeyPaths(d.element!, `${prefix}[]`);
    case "record":
      return schemaKeyPaths(d.valueType!, `${prefix}.*`);
    case "union":
      return [...new Set(d.options!.flatMap((o) => schemaKeyPaths(o, prefix)))];
    case "object":
      return Object.entries(d.shape!).flatMap(([k, v]) => {
        const p = prefix ? `${prefix}.${k}` : k;
        return [p, ...schemaKeyPaths(v, p)];
      });
    default:
      return [];
  }
}

/** Whether the document holds the path somewhere (`[]`: in some element, `*`: under some key). */
export function hasPath(doc: unknown, path: string): boolean {
  const parts = path.replace(/\[\]/g, ".[]").split(".").filter(Boolean);
  const walk = (v: unknown, i: number): boolean => {
    if (i === parts.length) return true;
    const p = parts[i]!;
    if (p === "[]") return Array.isArray(v) && v.some((e) => walk(e, i + 1));
    if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
    if (p === "*") return Object.values(v).some((e) => walk(e, i + 1));
    return Object.prototype.hasOwnProperty.call(v, p) && walk((v as Record<string, unknown>)[p], i + 1);
  };
  return walk(doc, 0);
}

/**
 * The example with its commented-out keys switched on: a line `# key: value` (or `#   key:` deeper
 * in, `#   - key:` in a list) loses its `# `, keeping the indentation after it. Prose comments
 * (`# Audit trail: ...`) are not keys and stay. So optional sections shown commented out are
 * checked by the loader too.
 */
export function uncommentKeys(yamlText: string): string {
  return yamlText
    .split("\n")
    .map((l) => l.replace(/^(\s*)# ?(\s*(?:- )?[a-z_][a-z0-9_]*:(?:\s|$))/, "$1$2"))
    .join("\n");
}
