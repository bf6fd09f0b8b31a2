import type { Command } from "commander";

// MCollective's exit codes for RPC commands, plus 64 for usage errors.
export const Exit = {
  OK: 0,
  NothingDiscovered: 1,
  SomeFailed: 2,
  NoResponses: 3,
  NoDiscoveryNoResponses: 4,
  Usage: 64,
} as const;

export function rpcExitCode(discovered: number, responded: number, failed: number, noResponse: number, usedDiscovery: boolean): number {
  if (discovered === 0) return usedDiscovery ? Exit.NothingDiscovered : Exit.NoDiscoveryNoResponses;
  if (responded === 0) return usedDiscovery ? Exit.NoResponses : Exit.NoDiscoveryNoResponses;
  if (failed > 0 || noResponse > 0) return Exit.SomeFailed;
  return Exit.OK;
}

/**
 * Commands that answer their own usage errors (main.ts leaves their exitOverride alone):
 * `muster nrpe` is a Nagios check, so a bad command line is UNKNOWN (3), never 64.
 */
export const ownsUsageErrors = new WeakSet<Command>();
