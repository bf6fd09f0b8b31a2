// The only place that spawns puppet and facter or talks to the Puppet CA.
export { PuppetAgent, writeHostsEntry, parseConfigPrint, type PuppetAgentSettings, type PuppetRunOptions, type PuppetRunResult, type CertificateRequest } from "./agent.js";
export {
  CertificateAuthority,
  SignRefusedError,
  caSettingsFromSsldir,
  type CertificateAuthoritySettings,
  type CertInfo,
  type CertList,
  type CertState,
  type SignRefusal,
} from "./ca.js";
export { parseCsr, csrFingerprint, fingerprintOf, normaliseFingerprint, PP_CLI_AUTH_OID, type ParsedCsr, type AltName } from "./csr.js";
export { setIniSettings, readIniSection, updatePuppetConf, readRunInterval, runIntervalOf } from "./conf.js";
export type { FailedResource, ReportDetails, ResourceOutcome } from "./report.js";
export { readLastRunReport, reportDetails } from "./report.js";
export { puppetStatePaths, readDisabled, disableAgent, enableAgent, catalogRunPid, readLastRunSummary, parseLastRunSummary, type PuppetStatePaths, type DisabledState, type LastRunSummary } from "./state.js";
export { exportedFacts, isFactName, factFileKind, factFileContent, writeFactFile, type FactFileKind } from "./facts.js";
export { runFacter, puppetFacts } from "./facter.js";
