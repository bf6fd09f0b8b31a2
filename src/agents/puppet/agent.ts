import { defineAgent, type Agent, type DataPlugin } from "../../agent/agent.js";
import { disable } from "./actions/disable.js";
import { enable } from "./actions/enable.js";
import { lastRunReport } from "./actions/last_run_report.js";
import { lastRunSummary } from "./actions/last_run_summary.js";
import { runonce } from "./actions/runonce.js";
import { status } from "./actions/status.js";
import { puppetDDL, type PuppetDDL } from "./ddl.js";
import { createRuntime, readStatus, type PuppetRuntime } from "./runtime.js";
import { puppetAgentFor } from "./settings.js";
import { statSync } from "node:fs";
import { puppetStatePaths, readRunInterval } from "../../puppet/index.js";
import { summaryRunStatus } from "../../protocol/puppet-run.js";
import type { NodeOps } from "../../agent/node-ops.js";

// The puppet agent: MCollective's puppet agent for muster, on the real Puppet agent (src/puppet).
//
// Settings (`plugins.puppet` in the server config, i.e. ctx.config; also given to
// createPuppetAgent({config}) so the data plugin knows the paths before any request). All optional:
//
//   puppet_bin             "puppet"              the puppet binary
//   confdir                "/etc/puppet"         Puppet confdir
//   vardir                 "/var/cache/puppet"   Puppet vardir; state/ holds the run and disable locks
//   ssldir                 "/var/lib/puppet/ssl" Puppet ssldir
//   logdir, rundir, publicdir  <vardir>/log, <vardir>/run, <vardir>/public
//                          (rundir holds the daemon's agent.pid, publicdir last_run_summary.yaml)
//   certname               the node's identity
//   server, serverport     (puppet.conf)         the master for every run
//   allow_server_override  false                 let runonce's `server` input pick the master
//   run_timeout            1800                  seconds a run may take before it is killed
//   splay                  false                 runonce's default for `splay`
//   splaylimit             1800                  runonce's default for `splaylimit` (seconds)
//   environment            (puppet.conf)         environment when runonce names none
//   export_facts           []                    facts of the node daemon given to runs (FACTER_<name>)
//   facts                  {}                    fixed facts given to runs (FACTER_<name>); lifecycle_stage
//                                                needs none: provisioning persists it (docs/puppet.md)
//
// After a run it started, the agent re-reads the node's classes (ctx.refreshMetadata) before it
// publishes run_complete.
//
// Events: muster.event.puppet.run_complete {identity, agent, event, time, data: RunCompleteData}
// once for every run runonce started, whether it succeeded, failed or could not start.

export interface PuppetAgentDeps {
  config?: Record<string, unknown>;
  identity?: string;
  now?: () => number;
  random?: () => number;
  /** What needs root (runs, the disable lock, the daemon): default in process. */
  ops?: NodeOps;
}

export type MusterPuppetAgent = Agent<PuppetDDL> & {
  /** The run this instance started and has not finished, if any (tests wait on it). */
  activeRun(): Promise<void> | undefined;
};

export function createPuppetAgent(deps: PuppetAgentDeps = {}): MusterPuppetAgent {
  const rt: PuppetRuntime = createRuntime(deps);

  const dataPlugin: DataPlugin = {
    name: "puppet",
    description: "The Puppet agent's state: enabled, applying, idling, daemon_present, status, lastrun, since_lastrun, disable_message, disabled_since, runinterval, last run counts and last_run_status (failed, changed, unchanged)",
    async query() {
      const s = rt.known();
      if (!s) return undefined;
      const st = await readStatus(rt, s);
      const summary = st.summary;
      return {
        enabled: st.enabled,
        disabled: !st.enabled,
        applying: st.applying,
        idling: st.idling,
        daemon_present: st.daemon_present,
        status: st.status,
        lastrun: st.lastrun,
        since_lastrun: st.since_lastrun ?? -1,
        disable_message: st.disable_message ?? "",
        disabled_message: st.disable_message ?? "",
        total_resources: summary?.resources.total ?? 0,
        changed_resources: summary?.resources.changed ?? 0,
        failed_resources: summary?.resources.failed ?? 0,
        total_time: summary?.time.total ?? 0,
        config_version: summary?.version.config ?? "",
        // fleet health (heartbeats carry these values): how the last run went, and since when
        // Puppet is disabled (the lock's time, 0 where the daemon may not look at it)
        last_run_status: summary && summary.lastrun > 0 ? summaryRunStatus(summary) : "",
        disabled_since: st.enabled ? 0 : lockTime(puppetStatePaths(puppetAgentFor(s)).disabledLockfile),
        // when the next run is due: fleet health counts Puppet stale past twice this
        runinterval: readRunInterval(s.confdir),
      };
    },
  };

  const agent = defineAgent({
    ddl: puppetDDL,
    actions: {
      runonce: runonce(rt),
      status: status(rt),
      last_run_summary: lastRunSummary(rt),
      last_run_report: lastRunReport(rt),
      enable: enable(rt),
      disable: disable(rt),
    },
    dataPlugins: [dataPlugin],
  });
  return Object.assign(agent, { activeRun: () => rt.active?.done });
}

/** When Puppet was disabled: its lock file's time, ms epoch (0 when it cannot be looked at). */
function lockTime(lockfile: string): number {
  try {
    return Math.round(statSync(lockfile).mtimeMs);
  } catch {
    return 0;
  }
}
