// The filter language: parse CLI filters, check wire filters, match node metadata.
export { FilterError } from "./error.js";
export {
  checkFactFilter,
  FilterLimits,
  parseAgentFilter,
  parseClassFilter,
  parseCompound,
  parseFactFilter,
  parseIdentityFilter,
  parseWith,
} from "./parse.js";
export { PQL_PREFIX, pqlQueryOf } from "./pql-identity.js";
export type { CompoundExpr, DataPluginCatalogue, DataPluginShape, FactStatement, FilterValue } from "./parse.js";
export { buildFilter, validateWireFilter } from "./build.js";
export type { FilterOptions } from "./build.js";
export { compileComparison, compileCompound, compileFilter, registeredData } from "./match.js";
export type { CompiledCompound, CompiledFilter, DataCall, DataLookup } from "./match.js";
