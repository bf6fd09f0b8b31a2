import { pino, type Logger } from "pino";

/** pino to a file (daemons with `logfile`) or stderr (so stdout stays clean for command output). */
export function createLogger(opts: { level?: string; file?: string; name?: string } = {}): Logger {
  const level = opts.level ?? process.env.MUSTER_LOG_LEVEL ?? "info";
  const dest = opts.file ? pino.destination({ dest: opts.file, mkdir: true, sync: false }) : pino.destination(2);
  return pino({ level, name: opts.name, base: { pid: process.pid } }, dest);
}

export const silentLogger: Logger = pino({ level: "silent" });
