import { setFlagsFromString } from "node:v8";
import { MusterError } from "../errors.js";

// An idle node daemon is the one muster process on every machine of the fleet, so its memory is
// a tracked figure (issue 39, docs/bench.md: "The idle node daemon"). V8's optimising compilers
// (Maglev, TurboFan) make 7 MB of the node binary's code resident and keep their own heap, to
// speed up JavaScript a daemon runs a few times a minute: a request's checks and replies are
// mostly native work (signatures, JSON, TLS). Without them, and with V8 told to favour size, an
// idle `muster server` holds about 11 MB less (80 to 69 MB on Node 24), and its start costs the
// same CPU; a request costs 1.27x the CPU under sustained load (bench/daemon-requests.ts), which
// a node's few requests a minute do not feel. MUSTER_SERVER_V8=speed keeps V8's defaults, for a
// node that answers hundreds a second.
// Node refuses these flags in NODE_OPTIONS, and the unit's command line is the launcher's, so the
// daemon sets them itself, before it loads its modules; V8 reads them when it decides to optimise.

export const V8_PROFILES = {
  size: ["--no-maglev", "--no-turbofan", "--optimize-for-size"],
  speed: [],
} as const satisfies Record<string, readonly string[]>;

/** The V8 flags `muster server` starts with, from MUSTER_SERVER_V8 (size, the default, or speed). */
export function serverV8Flags(env: NodeJS.ProcessEnv): readonly string[] {
  const profile = env.MUSTER_SERVER_V8 ?? "size";
  if (!Object.hasOwn(V8_PROFILES, profile)) {
    throw new MusterError("MUSTER_USAGE", `MUSTER_SERVER_V8=${JSON.stringify(profile)} is not a profile: use size (the default: less memory) or speed (V8's optimising compilers on)`);
  }
  return V8_PROFILES[profile as keyof typeof V8_PROFILES];
}

/** Applies serverV8Flags(env) to this process's V8. */
export function tuneV8ForServer(env: NodeJS.ProcessEnv = process.env): readonly string[] {
  const flags = serverV8Flags(env);
  for (const f of flags) setFlagsFromString(f);
  return flags;
}
