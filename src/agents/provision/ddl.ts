import type { AgentDDL } from "../../ddl/types.js";

// The provision agent's contract (mcprovision's node side). Handlers, the typed client, CLI
// coercion and docs derive from this object; the server validates every request against it.

const runOutputs = {
  exitcode: { description: "puppet agent --detailed-exitcodes status: 0 no changes, 2 changes, 4 failures, 6 changes and failures, 1 run failed", display_as: "Exit Code", type: "integer" },
  changed: { description: "Whether the run changed anything (exit 2 or 6)", display_as: "Changed", type: "boolean" },
  environment: { description: "Puppet environment the run used", display_as: "Environment", type: "string" },
  stage: { description: "Value of the lifecycle stage fact given to the run", display_as: "Stage", type: "string" },
  resources: { description: "Resource counts from last_run_summary.yaml: total, changed, failed, skipped, out_of_sync, ...", display_as: "Resources", type: "hash" },
  failed_resources: { description: "Resources that failed: [{resource, file?, line?, messages[]}] (also in the data of an Aborted reply)", display_as: "Failed Resources", type: "array", default: [] },
  errors: { description: "Error lines of the run (compile errors, resource failures)", display_as: "Errors", type: "array", default: [] },
  retryable: { description: "True when another Puppet run held the lock: try again later", display_as: "Retryable", type: "boolean", default: false },
  duration: { description: "Seconds the run took", display_as: "Duration", type: "float" },
  output: { description: "The last lines of Puppet's output", display_as: "Output", type: "string" },
  stage_fact_file: { description: "The fact file (stage_fact_file) that tells every later Puppet run it is production, once written (after a successful bootstrap run, before a production run); null for a noop or a failed bootstrap run", display_as: "Stage Fact File", type: "string" },
} as const;

export const provisionDDL = {
  metadata: {
    name: "provision",
    description: "Takes a node from first boot to Puppet-managed: master address, certificate, bootstrap and production runs, deploy lock",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    // Puppet runs take minutes; the run_timeout setting (default 840 s) stays below this.
    timeout: 900,
  },
  actions: {
    set_puppet_host: {
      description: "Point the node's Puppet agent at a master: server/serverport in puppet.conf [main] (and the hosts file when use_hosts_file is set)",
      display: "failed",
      input: {
        ipaddress: { prompt: "Master IP", description: "IPv4 address of the Puppet master", type: "string", validation: "ipv4address", maxlength: 15, optional: false },
        port: { prompt: "Master port", description: "The master's port (default: leave puppet.conf's or Puppet's 8140)", type: "integer", optional: true },
      },
      output: {
        server: { description: "The server setting written to puppet.conf", display_as: "Server", type: "string" },
        serverport: { description: "The serverport written, or null when left alone", display_as: "Port", type: "integer" },
        puppet_conf: { description: "Path of the puppet.conf changed", display_as: "puppet.conf", type: "string" },
        hosts_file: { description: "Hosts file given a `puppet` entry, or null", display_as: "Hosts File", type: "string" },
      },
    },
    has_cert: {
      description: "Whether the node has a signed certificate (fetching it from the CA when a request of ours is pending)",
      readonly: true,
      display: "always",
      input: {},
      output: {
        has_cert: { description: "The node holds its signed certificate and key", display_as: "Has Certificate", type: "boolean" },
        certname: { description: "The node's certname", display_as: "Certname", type: "string" },
        fingerprint: { description: "SHA-256 fingerprint of the certificate, or null", display_as: "Fingerprint", type: "string" },
      },
      aggregate: [{ function: "boolean_summary", output: "has_cert" }],
    },
    request_certificate: {
      description: "Create a key and CSR with the real Puppet agent and submit it to the CA; reply the CSR's fingerprint for the CA side to check",
      display: "always",
      input: {},
      output: {
        certname: { description: "The certname the CSR is for", display_as: "Certname", type: "string" },
        fingerprint: { description: "SHA-256 of the CSR (DER), AA:BB:... as Puppet prints it", display_as: "Fingerprint", type: "string" },
        submitted: { description: "False when the same CSR was already pending on the CA", display_as: "Submitted", type: "boolean" },
      },
    },
    bootstrap_puppet: {
      description: "One Puppet run in the bootstrap environment with the stage fact set to bootstrap",
      display: "always",
      input: {
        noop: { prompt: "No-op", description: "Only report what would change", type: "boolean", optional: true, default: false },
      },
      output: runOutputs,
      aggregate: [{ function: "summary", output: "exitcode" }],
    },
    run_puppet: {
      description: "One Puppet run in the production environment with the stage fact set to production",
      display: "always",
      input: {
        noop: { prompt: "No-op", description: "Only report what would change", type: "boolean", optional: true, default: false },
      },
      output: runOutputs,
      aggregate: [{ function: "summary", output: "exitcode" }],
    },
    daemonize_puppet: {
      description: "Start the Puppet agent daemon with the node's settings",
      display: "always",
      input: {},
      output: {
        pid: { description: "Process id of the daemon", display_as: "PID", type: "integer" },
        already_running: { description: "A daemon was already running; it was left alone", display_as: "Already Running", type: "boolean" },
      },
    },
    lock_deploy: {
      description: "Take the node's deploy lock for an owner: granted if free, expired or already the owner's (which renews it)",
      display: "failed",
      input: {
        owner: { prompt: "Owner", description: "Who takes the lock, e.g. the provisioner's identity", type: "string", validation: "^[\\w.@:/=-]+$", maxlength: 256, optional: false },
        lease: { prompt: "Lease", description: "Seconds until the lock expires (default: the lock_lease setting, 600)", type: "integer", optional: true },
      },
      output: {
        locked: { description: "The lock is held by the owner", display_as: "Locked", type: "boolean" },
        owner: { description: "The lock's owner", display_as: "Owner", type: "string" },
        expires: { description: "When the lock expires (ms since epoch)", display_as: "Expires", type: "integer" },
        taken: { description: "How it was granted: new, renewed (already ours) or expired (taken over)", display_as: "Taken", type: "string" },
      },
    },
    unlock_deploy: {
      description: "Release the deploy lock; the owner must match unless forced",
      display: "failed",
      input: {
        owner: { prompt: "Owner", description: "The lock's owner", type: "string", validation: "^[\\w.@:/=-]+$", maxlength: 256, optional: true },
        force: { prompt: "Force", description: "Release whoever holds it", type: "boolean", optional: true, default: false },
      },
      output: {
        unlocked: { description: "A lock was released", display_as: "Unlocked", type: "boolean" },
        previous_owner: { description: "Who held it, or null", display_as: "Previous Owner", type: "string" },
      },
    },
    is_locked: {
      description: "Whether the deploy lock is held (an expired lock counts as free)",
      readonly: true,
      display: "always",
      input: {},
      output: {
        locked: { description: "The lock is held and unexpired", display_as: "Locked", type: "boolean" },
        owner: { description: "Holder, or null", display_as: "Owner", type: "string" },
        expires: { description: "Expiry (ms since epoch), or null", display_as: "Expires", type: "integer" },
      },
      aggregate: [{ function: "boolean_summary", output: "locked" }],
    },
    disable_provisioner: {
      description: "Mark the node provisioned: writes the disable file; the agent then stops offering itself and refuses provisioning actions",
      display: "failed",
      input: {
        reason: { prompt: "Reason", description: "Recorded in the disable file", type: "string", maxlength: 1024, optional: true },
      },
      output: {
        disabled: { description: "The provisioner is disabled on this node", display_as: "Disabled", type: "boolean" },
        disable_file: { description: "Path of the disable file", display_as: "Disable File", type: "string" },
      },
    },
    is_disabled: {
      description: "Whether provisioning is disabled on this node",
      readonly: true,
      display: "always",
      input: {},
      output: {
        disabled: { description: "The disable file exists", display_as: "Disabled", type: "boolean" },
        since: { description: "When it was disabled (ms since epoch), or null", display_as: "Since", type: "integer" },
        reason: { description: "The recorded reason, or null", display_as: "Reason", type: "string" },
      },
      aggregate: [{ function: "boolean_summary", output: "disabled" }],
    },
  },
} as const satisfies AgentDDL;

export type ProvisionDDL = typeof provisionDDL;
