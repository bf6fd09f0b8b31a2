import { closeSync, fstatSync, openSync, readSync } from "node:fs";

// The end of a growing file (the console's audit file), read without reading it all.

export /** The whole lines in the last `bytes` of a file. */
function tailLines(file: string, bytes: number): string[] {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return []; // nothing recorded yet
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    const start = Math.max(0, size - bytes);
    const buf = Buffer.alloc(size - start);
    readSync(fd, buf, 0, buf.length, start);
    const lines = buf.toString("utf8").split("\n");
    return start > 0 ? lines.slice(1) : lines; // the first line may be cut
  } finally {
    closeSync(fd);
  }
}
