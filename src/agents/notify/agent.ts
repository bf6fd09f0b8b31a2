import { defineAgent, type Agent, type AgentKvOpener } from "../../agent/agent.js";
import { sendAction, type SendDeps } from "./actions/send.js";
import { notifyDDL, type NotifyDDL } from "./ddl.js";
import { DeliveryHealth } from "./delivery-health.js";

// The notify agent delivers provisioning notifications to admins.
//
// Config (`plugins.notify` in the server config; every key optional):
//   recipients     string[]  recipients used when a request names none, e.g.
//                            ["https://hooks.example/ops", "mailto:ops@example.com", "exec:/usr/local/bin/page ops"]
//   timeout        number    seconds each delivery may take (default 10); the DDL timeout (60 s) caps the whole action
//   exec_commands  string[]  absolute paths of commands that a request's own `exec:` recipients may run
//                            (default none). Configured `recipients` are trusted as written; without this list a
//                            caller could run any program on the node through `exec:`.
//   dedupe_window  number    seconds a delivered dedupe_key is remembered (default 86400): a repeat request
//                            with the key (a retry after a lost reply, a second provisioner) sends nothing
//   dedupe_bucket  string    JetStream KV bucket keeping delivered keys (default muster_notify; TTL = the
//                  | false   window), so a restarted notifier still sends each notification once; false:
//                            memory only. Unreachable (no JetStream, no permission): memory, with a warning
//   smtp.host      string    SMTP server for mailto: (default 127.0.0.1)
//   smtp.port      number    (default 25)
//   smtp.from      string    envelope and header sender (default muster@<identity>)
//   smtp.secure    boolean   implicit TLS, as on port 465 (default false; STARTTLS is used when offered)
//   smtp.user / smtp.pass    SMTP AUTH credentials (default none)
//
// Recipients:
//   http(s)://...           JSON POST {subject, message, sender, caller, time}; any non-2xx answer is a failure.
//                           user:pass@ in the URL is sent as Basic auth and masked in replies.
//   mailto:user@domain      one mail per recipient through smtp.*; headers X-Muster-Sender and X-Muster-Caller.
//   exec:/path/cmd args...  run without a shell (split on whitespace), message on stdin, environment
//                           MUSTER_SUBJECT, MUSTER_SENDER, MUSTER_CALLER; a non-zero exit is a failure.

export interface NotifyDeps {
  /** Clock for the notification's `time`. */
  now?: () => Date;
  /** HTTP client for webhooks. */
  fetch?: typeof globalThis.fetch;
  /** The server's KV buckets (dedupe keys that survive a restart); without it, memory only. */
  kv?: AgentKvOpener;
}

export type NotifyAgent = Agent<NotifyDDL>;

export function createNotifyAgent(deps: NotifyDeps = {}): NotifyAgent {
  const now = deps.now ?? (() => new Date());
  const health = new DeliveryHealth();
  const resolved: SendDeps = { now, fetch: deps.fetch ?? globalThis.fetch, kv: deps.kv, delivered: (subject, results) => health.record({ at: now().getTime(), subject, results }) };
  return defineAgent({
    ddl: notifyDDL,
    actions: { send: sendAction(resolved) },
    // the node hosting notify is the notifier: its heartbeat says whether its last delivery worked
    service: () => health.status(now().getTime()),
  });
}
