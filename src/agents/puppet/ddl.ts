import type { AgentDDL } from "../../ddl/types.js";

// The puppet agent's contract (MCollective's puppet agent, against the real Puppet agent).
// Handlers, the typed client, CLI coercion and --help derive from this object.

export const PUPPET_TAGS_RE = "^[A-Za-z0-9_:.-]+(,[A-Za-z0-9_:.-]+)*$";
export const PUPPET_SERVER_RE = "^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?$";

const statusOutputs = {
  applying: { description: "A catalog is being applied (Puppet's run lock is held, or a run this agent started is under way)", display_as: "Applying", type: "boolean" },
  enabled: { description: "Puppet runs are allowed (no agent_disabled.lock)", display_as: "Enabled", type: "boolean" },
  daemon_present: { description: "The Puppet agent daemon is running", display_as: "Daemon Running", type: "boolean" },
  idling: { description: "The daemon is present and not applying a catalog", display_as: "Idling", type: "boolean" },
  status: { description: "disabled, applying a catalog, splaying, idling or stopped", display_as: "Status", type: "string" },
  lastrun: { description: "When the last run ended (epoch seconds from last_run_summary.yaml; 0 when never)", display_as: "Last Run", type: "integer" },
  since_lastrun: { description: "Seconds since the last run ended, or null when never", display_as: "Since Last Run", type: "integer" },
  disable_message: { description: "Why Puppet is disabled, or null", display_as: "Lock Message", type: "string" },
  message: { description: "One line for people: status and age of the last run", display_as: "Message", type: "string" },
  last_run_duration: { description: "Seconds the last run took (time.total of last_run_summary.yaml), or null", display_as: "Last Run Duration", type: "float" },
  last_runonce: { description: "Result of the last run this agent started (the run_complete event's data), or null", display_as: "Last runonce", type: "hash" },
} as const;

export const puppetDDL = {
  metadata: {
    name: "puppet",
    description: "Runs and inspects the node's Puppet agent: start a run, status, last run summary, enable and disable",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    // runonce answers as soon as the run has started; the run's end is the run_complete event
    timeout: 20,
  },
  actions: {
    runonce: {
      description: "Start one Puppet run in the background and answer at once; its end is published as the event muster.event.puppet.run_complete",
      display: "always",
      input: {
        force: { prompt: "Force", description: "Start now: no splay, whatever was asked or configured", type: "boolean", optional: true, default: false },
        noop: { prompt: "No-op", description: "true: only report what would change; false: apply even if puppet.conf says noop (default: puppet.conf decides)", type: "boolean", optional: true },
        tags: { prompt: "Tags", description: "Apply only resources with these tags (comma-separated)", type: "string", validation: PUPPET_TAGS_RE, maxlength: 1024, optional: true },
        environment: { prompt: "Environment", description: "Puppet environment for this run", type: "string", validation: "^[a-z0-9_]+$", maxlength: 128, optional: true },
        splay: { prompt: "Splay", description: "Wait a random time up to splaylimit before running (default: the node's splay setting)", type: "boolean", optional: true },
        splaylimit: { prompt: "Splay limit", description: "Upper bound of the splay, seconds (default: the node's splaylimit setting)", type: "integer", optional: true },
        server: { prompt: "Server", description: "Master for this run, host[:port]; refused unless the node's allow_server_override is set", type: "string", validation: PUPPET_SERVER_RE, maxlength: 256, optional: true },
      },
      output: {
        started: { description: "A run was started (or is splaying)", display_as: "Started", type: "boolean" },
        summary: { description: "What happened", display_as: "Summary", type: "string" },
        initiated_at: { description: "When the request was accepted (ms since epoch)", display_as: "Initiated At", type: "integer" },
        splay_seconds: { description: "Seconds the run waits before starting", display_as: "Splay", type: "float" },
      },
      aggregate: [{ function: "boolean_summary", output: "started" }],
    },
    status: {
      description: "The Puppet agent's state: applying, enabled, daemon, idling, last run",
      readonly: true,
      display: "always",
      input: {},
      output: statusOutputs,
      aggregate: [
        { function: "summary", output: "status" },
        { function: "boolean_summary", output: "enabled" },
        { function: "boolean_summary", output: "applying" },
        { function: "boolean_summary", output: "daemon_present" },
        { function: "boolean_summary", output: "idling" },
      ],
    },
    last_run_summary: {
      description: "Counts and times of the last Puppet run, from Puppet's own last_run_summary.yaml",
      readonly: true,
      display: "always",
      input: {},
      output: {
        lastrun: { description: "When the last run ended (epoch seconds; 0 when never)", display_as: "Last Run", type: "integer" },
        since_lastrun: { description: "Seconds since then, or null", display_as: "Since Last Run", type: "integer" },
        config_version: { description: "The catalog's config version", display_as: "Config Version", type: "string" },
        puppet_version: { description: "Puppet version that made the run", display_as: "Puppet Version", type: "string" },
        environment: { description: "Environment the run converged to", display_as: "Environment", type: "string" },
        total_resources: { description: "Resources managed", display_as: "Total Resources", type: "integer", default: 0 },
        changed_resources: { description: "Resources changed", display_as: "Changed Resources", type: "integer", default: 0 },
        failed_resources: { description: "Resources that failed", display_as: "Failed Resources", type: "integer", default: 0 },
        out_of_sync_resources: { description: "Resources out of sync", display_as: "Out of Sync Resources", type: "integer", default: 0 },
        corrected_resources: { description: "Resources with corrective changes (drift Puppet put right)", display_as: "Corrected Resources", type: "integer", default: 0 },
        skipped_resources: { description: "Resources skipped", display_as: "Skipped Resources", type: "integer", default: 0 },
        total_time: { description: "Seconds the run took (time.total)", display_as: "Total Time", type: "float" },
        config_retrieval_time: { description: "Seconds spent getting the catalog", display_as: "Config Retrieval Time", type: "float" },
        events: { description: "Event counts: success, failure, total", display_as: "Events", type: "hash" },
        resources: { description: "Every resource count of the summary", display_as: "Resources", type: "hash" },
        time: { description: "Every timing of the summary (seconds)", display_as: "Times", type: "hash" },
      },
      aggregate: [
        { function: "average", output: "total_time", format: "%.2f" },
        { function: "average", output: "config_retrieval_time", format: "%.2f" },
        { function: "sum", output: "failed_resources" },
        { function: "sum", output: "changed_resources" },
        { function: "summary", output: "config_version" },
      ],
    },
    last_run_report: {
      description: "What the last Puppet run did resource by resource, from Puppet's last_run_report.yaml: changed and failed resources with their messages, and its warnings and errors",
      readonly: true,
      display: "always",
      input: {},
      output: {
        status: { description: "changed, unchanged or failed, as Puppet says", display_as: "Status", type: "string" },
        time: { description: "When the run started (ISO 8601)", display_as: "Time", type: "string" },
        environment: { description: "Environment of the run", display_as: "Environment", type: "string" },
        config_version: { description: "The catalog's config version", display_as: "Config Version", type: "string" },
        resources: { description: "Changed and failed resources, failed first: {resource, status, file?, line?, messages}", display_as: "Resources", type: "array", default: [] },
        resources_left_out: { description: "Changed or failed resources beyond the 200 listed", display_as: "Left Out", type: "integer", default: 0 },
        logs: { description: "Log lines at warning or above: {level, source?, message}", display_as: "Logs", type: "array", default: [] },
      },
    },
    enable: {
      description: "Allow Puppet runs again (puppet agent --enable)",
      display: "always",
      input: {},
      output: {
        enabled: { description: "Puppet runs are allowed", display_as: "Enabled", type: "boolean" },
        changed: { description: "False when it was enabled already", display_as: "Changed", type: "boolean" },
        status: { description: "What happened", display_as: "Status", type: "string" },
      },
      aggregate: [{ function: "boolean_summary", output: "changed" }],
    },
    disable: {
      description: "Stop Puppet runs (puppet agent --disable MESSAGE); an already disabled agent keeps its message",
      display: "always",
      input: {
        message: { prompt: "Message", description: "Why (default: who disabled it and when)", type: "string", maxlength: 1024, optional: true },
      },
      output: {
        enabled: { description: "Puppet runs are allowed (false once disabled)", display_as: "Enabled", type: "boolean" },
        changed: { description: "False when it was disabled already", display_as: "Changed", type: "boolean" },
        disable_message: { description: "The lock's message", display_as: "Lock Message", type: "string" },
        status: { description: "What happened", display_as: "Status", type: "string" },
      },
      aggregate: [{ function: "boolean_summary", output: "changed" }],
    },
  },
} as const satisfies AgentDDL;

export type PuppetDDL = typeof puppetDDL;

/** The data of a run_complete event (muster.event.puppet.run_complete). */
export interface RunCompleteData {
  /** Id of the runonce request that started the run. */
  requestid: string;
  initiated_at: number;
  started_at: number;
  finished_at: number;
  /** puppet --detailed-exitcodes: 0, 2 ok; 4, 6 failures; 1 run failed; -1 not run. */
  exitcode: number;
  success: boolean;
  changed: boolean;
  failed: boolean;
  /** The noop asked for; null when puppet.conf decided. */
  noop: boolean | null;
  environment: string | null;
  resources: Record<string, number>;
  failed_resources: string[];
  errors: string[];
  /** Seconds from the start of the puppet process to its end. */
  duration: number;
  message: string;
}

export const RUN_COMPLETE_EVENT = "run_complete";
