import { MusterError } from "../errors.js";
import type { ActionSpec, AgentDDL, InputSpec, OutputSpec } from "./types.js";
import { describeType } from "./validate.js";
import { findAction } from "./util.js";

// `muster rpc AGENT --help` text, derived from the DDL so it can never drift from validation.
// Layout follows `mco plugin doc`: labelled fields, right-aligned labels.

/** Help for the whole agent: its metadata and every action. */
export function renderAgentHelp(ddl: AgentDDL): string {
  const m = ddl.metadata;
  const names = Object.keys(ddl.actions).sort();
  const lines = [
    `${m.name} v${m.version}: ${m.description}`,
    "",
    ...fields("  ", [
      ["Author", m.author],
      ["License", m.license],
      ["URL", m.url],
      ["Timeout", `${m.timeout} seconds`],
    ]),
    "",
    "ACTIONS:",
    ...names.map((n) => `  ${n}`),
  ];
  for (const name of names) lines.push("", ...actionLines(ddl, name, requireAction(ddl, name)));
  return lines.join("\n");
}

/** Help for one action: usage, inputs, outputs and aggregates. */
export function renderActionHelp(ddl: AgentDDL, action: string): string {
  return actionLines(ddl, action, requireAction(ddl, action)).join("\n");
}

function requireAction(ddl: AgentDDL, action: string): ActionSpec {
  const spec = findAction(ddl, action);
  if (spec) return spec;
  const known = Object.keys(ddl.actions).sort().join(", ");
  throw new MusterError("MUSTER_UNKNOWN_ACTION", `agent '${ddl.metadata.name}' has no action '${action}'; actions: ${known || "none"}`);
}

function actionLines(ddl: AgentDDL, action: string, spec: ActionSpec): string[] {
  const inputs = Object.entries(spec.input);
  const outputs = Object.entries(spec.output);
  const lines = [`${ddl.metadata.name}#${action}: ${spec.description}`, "", `  Usage: ${usage(ddl.metadata.name, action, inputs)}`, ""];
  lines.push("  INPUT:");
  if (inputs.length === 0) lines.push("    This action takes no input.");
  for (const [name, input] of inputs) lines.push(`    ${name}:`, ...fields("       ", inputFields(input)));
  lines.push("", "  OUTPUT:");
  if (outputs.length === 0) lines.push("    This action declares no output.");
  for (const [name, output] of outputs) lines.push(`    ${name}:`, ...fields("       ", outputFields(output)));
  if (spec.aggregate && spec.aggregate.length > 0) {
    lines.push("", "  SUMMARY:");
    for (const agg of spec.aggregate) lines.push(`    ${agg.function}(${agg.output})${agg.format ? ` format ${JSON.stringify(agg.format)}` : ""}`);
  }
  return lines;
}

// Required inputs bare, optional ones in brackets, e.g. `muster rpc package install package=STRING [version=STRING]`.
function usage(agent: string, action: string, inputs: [string, InputSpec][]): string {
  const args = inputs.map(([name, input]) => {
    const arg = `${name}=${input.type.toUpperCase()}`;
    return input.optional ? `[${arg}]` : arg;
  });
  return ["muster rpc", agent, action, ...args].join(" ");
}

function inputFields(input: InputSpec): [string, string | undefined][] {
  return [
    ["Description", input.description],
    ["Prompt", input.prompt],
    ["Type", describeType(input)],
    ["Optional", String(input.optional)],
    ["Default", input.default === undefined ? undefined : JSON.stringify(input.default)],
    ["Validation", input.validation || undefined],
    ["Max length", input.maxlength ? String(input.maxlength) : undefined],
  ];
}

function outputFields(output: OutputSpec): [string, string | undefined][] {
  return [
    ["Description", output.description],
    ["Display As", output.display_as],
    ["Type", output.type],
    ["Default", output.default === undefined ? undefined : JSON.stringify(output.default)],
  ];
}

/** `Label: value` lines with labels right-aligned; fields without a value are left out. */
function fields(indent: string, rows: [string, string | undefined][]): string[] {
  const present = rows.filter((r): r is [string, string] => r[1] !== undefined);
  const width = Math.max(0, ...present.map(([k]) => k.length));
  return present.map(([k, v]) => `${indent}${k.padStart(width)}: ${v}`);
}
