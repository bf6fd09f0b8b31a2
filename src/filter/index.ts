// The filter language: parse CLI filters, check wire filters, match node metadata.
export { FilterError } from "./error.js";
export {
  FilterLimits,
  parseAgentFilter,
  parseClassFilter,
  parseCompound,
  parseFactFilter,
  parseIdentityFilter,
  parseWith,
} from "./parse.js";
export type { CompoundExpr, DataPluginCatalogue, DataPluginShape, FactStatement, FilterValue } from "./parse.js";
export { buildFilter, validateWireFilter } from "./build.js";
export type { FilterOptions } from "./build.js";
export { compileCompound, compileFilter } from "./match.js";
export type { CompiledCompound, CompiledFilter, DataCall, DataLookup } from "./match.js";
