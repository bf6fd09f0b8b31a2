import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { ClassesSource } from "../../src/server/metadata.js";
import { tempDir } from "../support/collective.js";

// ClassesSource on its own: the file followed, the watch (also of directories made later), and
// refresh() as the agents use it after a run. No fallback poll fires here (an hour).

const tmp = tempDir("metadata");
after(() => tmp.remove());
const log = pino({ level: "silent" });
const HOUR = 3_600_000;

/** Resolves with the next onChange list, or rejects at the deadline. */
function changes(): { onChange: (c: string[]) => void; next(timeoutMs: number): Promise<string[]> } {
  const seen: string[][] = [];
  let wake: (() => void) | undefined;
  return {
    onChange: (c) => (seen.push(c), wake?.()),
    next(timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const c = seen.shift();
          if (!c) return false;
          clearTimeout(t);
          wake = undefined;
          resolve(c);
          return true;
        };
        const t = setTimeout(() => reject(new Error(`no classes change within ${timeoutMs} ms`)), timeoutMs);
        if (!check()) wake = () => void check();
      });
    },
  };
}

test("follows a classes file whose directories do not exist yet, as Puppet makes them and rewrites it in place", async () => {
  const file = join(tmp.path, "a", "var", "state", "classes.txt");
  const ch = changes();
  const src = new ClassesSource({ locate: () => Promise.resolve(file), pollMs: HOUR, settleMs: 20, log, onChange: ch.onChange });
  try {
    await src.start();
    assert.deepEqual(src.classes, []);
    mkdirSync(join(tmp.path, "a", "var"), { recursive: true });
    mkdirSync(join(tmp.path, "a", "var", "state"));
    writeFileSync(file, "settings\nrole::web\nrole::web\n");
    assert.deepEqual(await ch.next(10_000), ["role::web", "settings"]);
    writeFileSync(file, "settings\nrole::db\n"); // in place, as Puppet does
    assert.deepEqual(await ch.next(10_000), ["role::db", "settings"]);
  } finally {
    src.stop();
  }
});

test("refresh() reflects the file at once, without waiting for the watch; an unchanged file is no change", async () => {
  const file = join(tmp.path, "b", "classes.txt");
  mkdirSync(join(tmp.path, "b"));
  writeFileSync(file, "base\n");
  const seen: string[][] = [];
  // the watch would only report after an hour of quiet: refresh() alone must do it
  const src = new ClassesSource({ locate: () => Promise.resolve(file), pollMs: HOUR, settleMs: HOUR, log, onChange: (c) => seen.push(c) });
  try {
    await src.start();
    assert.deepEqual(src.classes, ["base"]);
    assert.deepEqual(seen, [], "the first read is not a change");
    writeFileSync(file, "base\nnginx\n");
    const first = src.refresh();
    writeFileSync(file, "base\nnginx\nphp\n");
    await Promise.all([first, src.refresh()]); // a refresh during a read gets a read of its own
    assert.deepEqual(src.classes, ["base", "nginx", "php"]);
    await src.refresh();
    assert.deepEqual(seen.at(-1), ["base", "nginx", "php"]);
    const count = seen.length;
    await src.refresh();
    assert.equal(seen.length, count);
  } finally {
    src.stop();
  }
});

test("asks where the file is again when the location key changes", async () => {
  const one = join(tmp.path, "c1.txt");
  const two = join(tmp.path, "c2.txt");
  writeFileSync(one, "from_one\n");
  writeFileSync(two, "from_two\n");
  let where = one;
  let asked = 0;
  const src = new ClassesSource({ locate: () => (asked++, Promise.resolve(where)), locationKey: () => where, pollMs: HOUR, settleMs: HOUR, log });
  try {
    await src.start();
    await src.refresh();
    assert.deepEqual(src.classes, ["from_one"]);
    assert.equal(asked, 1, "asked once while the key stays the same");
    where = two;
    await src.refresh();
    assert.deepEqual(src.classes, ["from_two"]);
    assert.equal(src.path, two);
    assert.equal(asked, 2);
  } finally {
    src.stop();
  }
});
