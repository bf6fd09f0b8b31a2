import { createRequire } from "node:module";
import type { Logger } from "pino";

// pino (14 ms to load) loads with the first logger made or used: a command that logs nothing
// (`muster find`, the client's silent default) never loads it. pino is CommonJS, so require()
// gets the very module `import "pino"` gets elsewhere.
const require = createRequire(import.meta.url);
const lib = () => (require("pino") as typeof import("pino")).pino;

/** pino to a file (daemons with `logfile`) or stderr (so stdout stays clean for command output). */
export function createLogger(opts: { level?: string; file?: string; name?: string } = {}): Logger {
  const level = opts.level ?? process.env.MUSTER_LOG_LEVEL ?? "info";
  const pino = lib();
  const dest = opts.file ? pino.destination({ dest: opts.file, mkdir: true, sync: false }) : pino.destination(2);
  return pino({ level, name: opts.name, base: { pid: process.pid } }, dest);
}

let silent: Logger | undefined;
const silentPino = () => (silent ??= lib()({ level: "silent" }));
/** pino at level silent, made on first use: every property read or written goes to it. */
export const silentLogger: Logger = new Proxy({} as Logger, {
  get: (_, p) => Reflect.get(silentPino(), p),
  set: (_, p, v) => Reflect.set(silentPino(), p, v),
  has: (_, p) => Reflect.has(silentPino(), p),
});
