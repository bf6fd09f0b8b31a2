import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { ClassesSource, FactSource } from "../../src/server/metadata.js";
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

test("facts: Puppet's view gathered when asked (start, a run) or when the last gather is gather_interval old; the file re-read at every refresh; one refresh at a time", async () => {
  const file = join(tmp.path, "facts.yaml");
  writeFileSync(file, "pinned: a\n");
  let clock = 1_000_000;
  let gathers = 0;
  let running = 0;
  let overlapped = false;
  const src = new FactSource({
    gather: async () => {
      running++;
      overlapped ||= running > 1;
      await new Promise((r) => setImmediate(r));
      running--;
      return { gathered: ++gathers };
    },
    factsFile: file,
    extra: {},
    log,
    gatherEveryMs: 1_800_000,
    now: () => clock,
  });
  await src.refresh(true);
  assert.deepEqual(src.facts, { gathered: 1, pinned: "a" });
  // the interval's refreshes: the file again, Puppet's view not yet
  writeFileSync(file, "pinned: b\n");
  clock += 300_000;
  await src.refresh();
  assert.deepEqual(src.facts, { gathered: 1, pinned: "b" });
  // a run ended: gathered at once
  await src.refresh(true);
  assert.equal(src.facts.gathered, 2);
  assert.equal(src.gatheredAt, clock);
  // none for gather_interval: the next refresh past it gathers
  clock += 1_799_999;
  await src.refresh();
  assert.equal(src.facts.gathered, 2);
  clock += 1;
  await src.refresh();
  assert.equal(src.facts.gathered, 3);
  // asked for together, they run one after the other
  await Promise.all([src.refresh(true), src.refresh(true), src.refresh()]);
  assert.equal(src.facts.gathered, 5);
  assert.equal(overlapped, false);
});

test("facts: without gatherEveryMs every refresh gathers (the option's absence keeps the old behaviour)", async () => {
  let gathers = 0;
  const src = new FactSource({ gather: async () => ({ n: ++gathers }), extra: {}, log });
  await src.refresh();
  await src.refresh();
  assert.equal(src.facts.n, 2);
});
