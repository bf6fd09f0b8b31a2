import type { AgentDDL } from "../../ddl/types.js";

// The notify agent's contract. Handlers, the typed client and the CLI derive from this object.

export const notifyDDL = {
  metadata: {
    name: "notify",
    description: "Delivers notifications to admins through webhooks, mail and local commands",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    timeout: 60,
  },
  actions: {
    send: {
      description: "Deliver a message to every recipient in parallel",
      display: "failed",
      input: {
        subject: {
          prompt: "Subject",
          description: "One-line subject of the notification",
          type: "string",
          optional: false,
          maxlength: 512,
        },
        message: {
          prompt: "Message",
          description: "Body of the notification (plain text)",
          type: "string",
          optional: false,
          maxlength: 65536,
        },
        recipients: {
          prompt: "Recipients",
          description:
            "Recipient URLs: http(s)://... (JSON POST), mailto:addr (SMTP), exec:/path/to/cmd arg... (message on stdin). Defaults to the agent's configured recipients",
          type: "array",
          optional: true,
        },
        dedupe_key: {
          prompt: "Deduplication key",
          description:
            "Deliver at most once per key: a repeat while the first is in flight or after it succeeded (within plugins.notify.dedupe_window) is answered without sending again. The provisioner sends <node>#<round>#<outcome>",
          type: "string",
          optional: true,
          maxlength: 512,
        },
      },
      output: {
        duplicate: { description: "True when this key was already delivered and nothing was sent again", display_as: "Duplicate", type: "boolean" },
        delivered: { description: "Recipients that accepted the notification", display_as: "Delivered", type: "integer" },
        failed: { description: "Recipients that could not be reached or refused it", display_as: "Failed", type: "integer" },
        results: { description: "Per recipient: {recipient, ok, error?}", display_as: "Results", type: "array" },
      },
      aggregate: [
        { function: "sum", output: "delivered" },
        { function: "sum", output: "failed" },
      ],
    },
  },
} as const satisfies AgentDDL;

export type NotifyDDL = typeof notifyDDL;
