import { isAbsolute } from "node:path";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";

// A recipient is a URL naming how to reach someone: a webhook, a mailbox or a local command.

export type Recipient =
  | { kind: "webhook"; text: string; url: URL }
  | { kind: "mail"; text: string; address: string }
  | { kind: "exec"; text: string; argv: [string, ...string[]] };

const MAIL_ADDRESS = /^[^\s@<>,;"]+@[^\s@<>,;"]+$/;

function invalid(text: string, why: string): RpcError {
  return new RpcError(Status.InvalidData, `invalid recipient ${JSON.stringify(text)}: ${why}`);
}

/** Parse one recipient; anything unusable is InvalidData, before anything is delivered. */
export function parseRecipient(text: string): Recipient {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(text)?.[1]?.toLowerCase();
  switch (scheme) {
    case "http":
    case "https": {
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        throw invalid(text, "not a valid URL");
      }
      return { kind: "webhook", text, url };
    }
    case "mailto": {
      let address: string;
      try {
        address = decodeURIComponent(text.slice("mailto:".length).split("?")[0] ?? "");
      } catch {
        throw invalid(text, "bad percent-encoding");
      }
      if (!MAIL_ADDRESS.test(address)) throw invalid(text, "expected mailto:user@domain");
      return { kind: "mail", text, address };
    }
    case "exec": {
      const [command, ...args] = text.slice("exec:".length).trim().split(/\s+/);
      if (!command || !isAbsolute(command)) throw invalid(text, "expected exec:/absolute/path/to/command [args...]");
      return { kind: "exec", text, argv: [command, ...args] };
    }
    default:
      throw invalid(text, scheme ? `unknown scheme "${scheme}:" (use http:, https:, mailto: or exec:)` : "expected a URL with a scheme (http:, https:, mailto: or exec:)");
  }
}

/** The recipient as shown in replies and logs: a webhook's password is masked. */
export function displayRecipient(r: Recipient): string {
  if (r.kind !== "webhook" || !r.url.password) return r.text;
  const u = new URL(r.url);
  u.password = "***";
  return u.toString();
}
