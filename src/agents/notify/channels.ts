import { spawn } from "node:child_process";
import type { SmtpSettings } from "./config.js";
import type { Recipient } from "./recipient.js";

// One function per delivery channel. Each resolves when the recipient accepted the notification,
// rejects with an Error saying why not, and gives up promptly when `signal` aborts.

export interface Notification {
  subject: string;
  message: string;
  /** Identity of the node sending it. */
  sender: string;
  /** Who asked for it (the request's caller). */
  caller: string;
  /** ISO 8601. */
  time: string;
}

export interface ChannelOptions {
  signal: AbortSignal;
  timeoutMs: number;
  smtp: SmtpSettings;
  fetch: typeof globalThis.fetch;
}

const STDERR_TAIL = 2000;

export function deliver(r: Recipient, note: Notification, opts: ChannelOptions): Promise<void> {
  switch (r.kind) {
    case "webhook":
      return postWebhook(r.url, note, opts);
    case "mail":
      return sendMail(r.address, note, opts);
    case "exec":
      return runCommand(r.argv, note, opts);
  }
}

async function postWebhook(target: URL, note: Notification, opts: ChannelOptions): Promise<void> {
  const url = new URL(target);
  const headers: Record<string, string> = { "content-type": "application/json", "user-agent": "muster-notify" };
  if (url.username || url.password) {
    // fetch refuses URLs with credentials: send them as Basic auth instead.
    const creds = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
    headers.authorization = `Basic ${Buffer.from(creds).toString("base64")}`;
    url.username = "";
    url.password = "";
  }
  const body = JSON.stringify({ subject: note.subject, message: note.message, sender: note.sender, caller: note.caller, time: note.time });
  // A redirected POST would silently turn into a GET: treat a redirect as a failure instead.
  const res = await opts.fetch(url, { method: "POST", headers, body, signal: opts.signal, redirect: "manual" });
  await res.body?.cancel().catch(() => undefined);
  if (res.status < 200 || res.status > 299) throw new Error(`HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`);
}

async function sendMail(to: string, note: Notification, opts: ChannelOptions): Promise<void> {
  const { smtp } = opts;
  // Loaded on first use: every node hosts this agent, few ever send mail, and nodemailer would
  // otherwise add megabytes to each idle `muster server`.
  const { default: nodemailer } = await import("nodemailer");
  const transport = nodemailer.createTransport({
    host: smtp.host,
    port: smtp.port,
    secure: smtp.secure,
    ...(smtp.auth ? { auth: smtp.auth } : {}),
    connectionTimeout: opts.timeoutMs,
    greetingTimeout: opts.timeoutMs,
    socketTimeout: opts.timeoutMs,
  });
  try {
    await untilAborted(
      transport.sendMail({
        from: smtp.from,
        to,
        subject: note.subject,
        text: note.message,
        headers: { "X-Muster-Sender": note.sender, "X-Muster-Caller": note.caller },
      }),
      opts.signal,
    );
  } finally {
    transport.close();
  }
}

function runCommand(argv: [string, ...string[]], note: Notification, opts: ChannelOptions): Promise<void> {
  const [command, ...args] = argv;
  return new Promise<void>((resolve, reject) => {
    if (opts.signal.aborted) return reject(abortError(opts.signal));
    // No shell; its own process group so an abort also stops whatever it started.
    const child = spawn(command, args, {
      stdio: ["pipe", "ignore", "pipe"],
      detached: true,
      env: { ...process.env, MUSTER_SUBJECT: note.subject, MUSTER_SENDER: note.sender, MUSTER_CALLER: note.caller },
    });
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (d: string) => (stderr = (stderr + d).slice(-STDERR_TAIL)));
    const onAbort = () => {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(-child.pid, "SIGTERM");
        } catch {
          child.kill("SIGTERM");
        }
      }
      reject(abortError(opts.signal));
    };
    opts.signal.addEventListener("abort", onAbort, { once: true });
    child.once("error", (e) => {
      opts.signal.removeEventListener("abort", onAbort);
      reject(new Error(`cannot run ${command}: ${e.message}`));
    });
    child.once("close", (code, signal) => {
      opts.signal.removeEventListener("abort", onAbort);
      const tail = stderr.trim() ? `: ${stderr.trim()}` : "";
      if (code === 0) resolve();
      else if (signal) reject(new Error(`${command} was killed by ${signal}${tail}`));
      else reject(new Error(`${command} exited with code ${code}${tail}`));
    });
    // A command that does not read its stdin is fine: ignore EPIPE.
    child.stdin?.on("error", () => undefined);
    child.stdin?.end(note.message);
  });
}

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(`aborted: ${String(reason)}`);
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
