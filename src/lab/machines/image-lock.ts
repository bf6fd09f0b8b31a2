import { existsSync, mkdirSync, readFileSync, rmSync, watch, writeFileSync, type FSWatcher } from "node:fs";
import { basename, dirname, join } from "node:path";
import { isAlive } from "../processes.js";

// The lock one image build holds beside the cache (image.ts): a second process that wants the same
// image waits for it instead of building its own.

/** Takes the build lock (a directory naming its owner's pid), or says another live process holds it. */
export function takeLock(lock: string): boolean {
  try {
    mkdirSync(lock);
    writeFileSync(join(lock, "pid"), `${process.pid}\n`);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    const pid = Number(readFileSync(join(lock, "pid"), { encoding: "utf8", flag: "a+" }).trim());
    // its owner is gone (killed mid-build), or has not written its pid yet (then wait a moment)
    if (pid && !isAlive(pid)) rmSync(lock, { recursive: true, force: true });
    return false;
  }
}

/** Resolves when the lock directory goes, or after a while to look whether its owner still lives. */
export function lockReleased(lock: string): Promise<void> {
  return new Promise((resolve) => {
    let watcher: FSWatcher | undefined;
    const done = () => {
      clearTimeout(timer);
      watcher?.close();
      resolve();
    };
    const timer = setTimeout(done, 5_000);
    try {
      watcher = watch(dirname(lock), (_e, name) => (name === basename(lock) && !existsSync(lock) ? done() : undefined));
    } catch {
      /* the timer alone */
    }
    if (!existsSync(lock)) done();
  });
}
