// Agent schemas: validation, CLI coercion, output defaults, aggregates, loading and help.
export { validateInput, inputProblem, validationProblem, describeType, type InputProblem } from "./validate.js";
export { coerceCliInputs } from "./coerce.js";
export { applyOutputDefaults, checkOutputs } from "./outputs.js";
export {
  aggregateReplies,
  computeAggregate,
  formatAggregate,
  type AggregateResult,
  type SummaryAggregate,
  type NumericAggregate,
  type BooleanSummaryAggregate,
} from "./aggregate.js";
export { parseDDL, loadDDLFile } from "./load.js";
export { renderAgentHelp, renderActionHelp } from "./help.js";
export * from "./types.js";
