// An agent's contract, declared once. Built-in agents export their DDL `as const satisfies AgentDDL`
// so handlers, the typed client and CLI coercion are all derived from it; external agents ship the
// same shape as JSON.

export type InputType = "string" | "integer" | "float" | "number" | "boolean" | "list" | "hash" | "array";

/** Named validators usable in `validation` besides a regular expression source. */
export const NamedValidators = ["shellsafe", "ipv4address", "ipv6address"] as const;
export type NamedValidator = (typeof NamedValidators)[number];

export interface InputSpec {
  prompt?: string;
  description: string;
  type: InputType;
  optional: boolean;
  default?: unknown;
  /** For strings: a named validator or a regular expression source (no slashes). */
  validation?: string;
  maxlength?: number;
  /** For type "list": the allowed values. */
  list?: readonly (string | number | boolean)[];
}

export interface OutputSpec {
  description: string;
  display_as: string;
  default?: unknown;
  type?: "string" | "integer" | "float" | "number" | "boolean" | "hash" | "array" | "any";
}

export type AggregateFunction = "summary" | "average" | "sum" | "boolean_summary";

export interface AggregateSpec {
  function: AggregateFunction;
  /** The output field aggregated. */
  output: string;
  /** Display format, printf-like `%s` / `%.2f`, optional. */
  format?: string;
}

export interface ActionSpec {
  description: string;
  /** Which replies the CLI prints by default: only failed ones, only ok ones, or all. */
  display?: "ok" | "failed" | "always";
  /** The action only reads (changes nothing on the node): the console's audit view leaves such requests out unless asked. */
  readonly?: boolean;
  input: Record<string, InputSpec>;
  output: Record<string, OutputSpec>;
  aggregate?: readonly AggregateSpec[];
}

export interface AgentMetadata {
  name: string;
  description: string;
  author?: string;
  license?: string;
  version: string;
  url?: string;
  /** Seconds an action may run before it is aborted (node side) and the client stops waiting. */
  timeout: number;
}

export interface AgentDDL {
  metadata: AgentMetadata;
  actions: Record<string, ActionSpec>;
}

// ---- type-level derivation from an `as const` DDL ----

type InputValue<S> = S extends { type: "string" }
  ? string
  : S extends { type: "integer" | "float" | "number" }
    ? number
    : S extends { type: "boolean" }
      ? boolean
      : S extends { type: "list"; list: readonly (infer V)[] }
        ? V
        : S extends { type: "hash" }
          ? Record<string, unknown>
          : S extends { type: "array" }
            ? unknown[]
            : unknown;

type RequiredKeys<I> = { [K in keyof I]: I[K] extends { optional: false } ? K : I[K] extends { default: unknown } ? K : never }[keyof I];
type OptionalKeys<I> = Exclude<keyof I, RequiredKeys<I>>;

/** The validated input an action handler receives (defaults applied). */
export type ActionInput<D extends AgentDDL, A extends keyof D["actions"]> = {
  [K in RequiredKeys<D["actions"][A]["input"]>]: InputValue<D["actions"][A]["input"][K]>;
} & {
  [K in OptionalKeys<D["actions"][A]["input"]>]?: InputValue<D["actions"][A]["input"][K]>;
};

/** Input as a caller passes it: optional and defaulted inputs may be omitted. */
export type CallInput<D extends AgentDDL, A extends keyof D["actions"]> = {
  [K in keyof D["actions"][A]["input"] as D["actions"][A]["input"][K] extends { optional: false } ? K : never]: InputValue<D["actions"][A]["input"][K]>;
} & {
  [K in keyof D["actions"][A]["input"] as D["actions"][A]["input"][K] extends { optional: false } ? never : K]?: InputValue<D["actions"][A]["input"][K]>;
};

export type ActionName<D extends AgentDDL> = keyof D["actions"] & string;

type OutputValue<S> = S extends { type: "string" }
  ? string
  : S extends { type: "integer" | "float" | "number" }
    ? number
    : S extends { type: "boolean" }
      ? boolean
      : S extends { type: "hash" }
        ? Record<string, unknown>
        : S extends { type: "array" }
          ? unknown[]
          : unknown;

type Outputs<D extends AgentDDL, A extends keyof D["actions"]> = D["actions"][A]["output"];

/**
 * An action's reply data as the typed client hands it over: every declared output of its DDL type
 * (checked on arrival, see ddl/outputs.ts checkOutputs), `null` where the node says "none". Outputs
 * with a DDL default are always present; the others may be absent (a failed action, an older node).
 */
export type ActionOutput<D extends AgentDDL, A extends keyof D["actions"]> = {
  [K in keyof Outputs<D, A> as Outputs<D, A>[K] extends { default: unknown } ? K : never]: OutputValue<Outputs<D, A>[K]> | null;
} & {
  [K in keyof Outputs<D, A> as Outputs<D, A>[K] extends { default: unknown } ? never : K]?: OutputValue<Outputs<D, A>[K]> | null;
};
