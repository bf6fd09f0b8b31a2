import { SMTPServer } from "smtp-server";

// A real SMTP server for tests: loopback, no auth, no TLS. Messages are kept in memory, parsed
// just enough to check what a test sent (single-part or the first text/plain part of a multipart).

export interface ReceivedMail {
  /** Envelope sender (MAIL FROM). */
  from: string;
  /** Envelope recipients (RCPT TO). */
  to: string[];
  /** Decoded Subject header. */
  subject: string;
  /** Decoded plain-text body, line endings as \n. */
  text: string;
  /** Header names lower-cased; values unfolded, not decoded. */
  headers: Record<string, string>;
  raw: string;
}

export interface SmtpReceiver {
  host: string;
  port: number;
  messages: ReceivedMail[];
  waitFor(n: number, timeoutMs: number): Promise<ReceivedMail[]>;
  close(): Promise<void>;
}

export async function startSmtpReceiver(opts: { host?: string } = {}): Promise<SmtpReceiver> {
  const host = opts.host ?? "127.0.0.1";
  if (!host.startsWith("127.")) throw new Error(`SMTP receiver must listen on 127.0.0.0/8, not ${host}`);
  const messages: ReceivedMail[] = [];
  const waiters = new Set<{ n: number; resolve: (m: ReceivedMail[]) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();

  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ["AUTH", "STARTTLS"],
    hideSTARTTLS: true,
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", callback);
      stream.on("end", () => {
        const raw = Buffer.concat(chunks).toString("utf8");
        const { headers, subject, text } = parseMessage(raw);
        const env = session.envelope;
        messages.push({
          from: env.mailFrom ? env.mailFrom.address : "",
          to: env.rcptTo.map((r) => r.address),
          subject,
          text,
          headers,
          raw,
        });
        for (const w of waiters) {
          if (messages.length >= w.n) {
            waiters.delete(w);
            clearTimeout(w.timer);
            w.resolve(messages.slice());
          }
        }
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  // Errors on a live server (a client hanging up) must not crash the test process.
  server.on("error", () => undefined);
  const addr = server.server.address();
  if (!addr || typeof addr !== "object") throw new Error("SMTP receiver has no address");
  const port = addr.port;
  let closed = false;

  return {
    host,
    port,
    messages,
    waitFor(n, timeoutMs) {
      if (messages.length >= n) return Promise.resolve(messages.slice());
      if (closed) return Promise.reject(new Error(`SMTP receiver on ${host}:${port} is closed`));
      return new Promise((resolve, reject) => {
        const w = {
          n,
          resolve,
          reject,
          timer: setTimeout(() => {
            waiters.delete(w);
            reject(new Error(`SMTP receiver on ${host}:${port}: expected ${n} message(s) within ${timeoutMs} ms, got ${messages.length}`));
          }, timeoutMs),
        };
        waiters.add(w);
      });
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.reject(new Error(`SMTP receiver on ${host}:${port} closed after ${messages.length} of ${w.n} message(s)`));
      }
      waiters.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// ---- minimal MIME parsing ----

interface Part {
  headers: Record<string, string>;
  body: string;
}

function splitPart(raw: string): Part {
  const normalised = raw.replace(/\r\n/g, "\n");
  const end = normalised.indexOf("\n\n");
  const head = end === -1 ? normalised : normalised.slice(0, end);
  const body = end === -1 ? "" : normalised.slice(end + 2);
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\n[ \t]+/g, " ").split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    if (!(name in headers)) headers[name] = line.slice(colon + 1).trim();
  }
  return { headers, body };
}

function parseMessage(raw: string): { headers: Record<string, string>; subject: string; text: string } {
  const top = splitPart(raw);
  const textPart = findText(top) ?? top;
  return { headers: top.headers, subject: decodeWords(top.headers.subject ?? ""), text: decodeBody(textPart) };
}

function findText(part: Part): Part | undefined {
  const type = part.headers["content-type"] ?? "text/plain";
  if (/^text\/plain/i.test(type)) return part;
  const boundary = /boundary="?([^";]+)"?/i.exec(type)?.[1];
  if (!/^multipart\//i.test(type) || !boundary) return undefined;
  const sections = part.body.split(`--${boundary}`).slice(1);
  for (const s of sections) {
    if (s.startsWith("--")) break;
    const found = findText(splitPart(s.replace(/^\n/, "")));
    if (found) return found;
  }
  return undefined;
}

function decodeBody(part: Part): string {
  const cte = (part.headers["content-transfer-encoding"] ?? "7bit").toLowerCase();
  const charset = (/charset="?([^";]+)"?/i.exec(part.headers["content-type"] ?? "")?.[1] ?? "utf-8").toLowerCase();
  let bytes: Buffer;
  if (cte === "base64") bytes = Buffer.from(part.body.replace(/\s+/g, ""), "base64");
  else if (cte === "quoted-printable") bytes = decodeQuotedPrintable(part.body);
  else bytes = Buffer.from(part.body, "utf8");
  const text = new TextDecoder(charset).decode(bytes);
  // The message ends with the line break that precedes the SMTP terminator.
  return text.replace(/\r\n/g, "\n").replace(/\n$/, "");
}

function decodeQuotedPrintable(s: string): Buffer {
  const joined = s.replace(/=\r?\n/g, "");
  const out: number[] = [];
  for (let i = 0; i < joined.length; i++) {
    const c = joined[i] ?? "";
    const hex = joined.slice(i + 1, i + 3);
    if (c === "=" && /^[0-9A-Fa-f]{2}$/.test(hex)) {
      out.push(parseInt(hex, 16));
      i += 2;
    } else {
      out.push(...Buffer.from(c, "utf8"));
    }
  }
  return Buffer.from(out);
}

/** RFC 2047 encoded words (=?charset?B|Q?...?=), adjacent words joined without the space between. */
function decodeWords(value: string): string {
  return value
    .replace(/(\?=)\s+(=\?)/g, "$1$2")
    .replace(/=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g, (_m, charset: string, enc: string, data: string) => {
      const bytes =
        enc.toUpperCase() === "B" ? Buffer.from(data, "base64") : decodeQuotedPrintable(data.replace(/_/g, " "));
      return new TextDecoder(charset.toLowerCase()).decode(bytes);
    });
}
