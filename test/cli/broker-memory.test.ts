import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { brokerMemory, nextMemory } from "../../src/cli/broker-memory.js";
import { cleanEnv, eventually, runCli, tempDir } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// A broker member that lost its power answers nothing: a connect that picks it waits out its
// whole timeout (5 s) before trying the next. The CLI remembers such a member for 30 s and tries
// the others first (cli/broker-memory.ts). The dead member here is a port that accepts and never
// speaks, as a relay in front of a powered-off machine does; the other is a real nats-server.

const tmp = tempDir("broker-memory");
const env = cleanEnv(join(tmp.path, "config"));
let nats: NatsHandle;
let silent: Server;
const held: Socket[] = [];
let dialled = 0;

before(async () => {
  nats = await startNats();
  silent = createServer((s) => {
    dialled++;
    held.push(s);
    s.on("error", () => undefined);
  });
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
});

after(async () => {
  for (const s of held) s.destroy();
  await new Promise((r) => silent?.close(r));
  await nats?.stop();
  tmp.remove();
});

test("the memory: a member that failed is kept 30 s, then forgotten; one that answered is dropped at once", () => {
  const t = 1_000_000;
  const saved = new Map([["a:4222", t - 40_000], ["b:4222", t - 10_000]]);
  assert.deepEqual([...nextMemory(saved, ["c:4222"], "d:4222", t)], [["b:4222", t - 10_000], ["c:4222", t]], "a is past 30 s");
  assert.deepEqual([...nextMemory(saved, [], "b:4222", t)], [], "b answered now");
  assert.deepEqual([...nextMemory(new Map([["x:1", t + 60_000]]), [], undefined, t)], [], "a time in the future (a clock set back) is not trusted");
  assert.equal(brokerMemory({ ...env, MUSTER_BROKER_CACHE: "off" }), undefined);
});

test("a member that did not answer a command's connect is tried last by the commands after it: none of them waits on it again", async () => {
  const key = `127.0.0.1:${(silent.address() as { port: number }).port}`;
  const silentUrl = `nats://${key}`;
  const file = join(env.XDG_CACHE_HOME!, "muster", "brokers-unanswered.json");
  const ping = async () => {
    const r = await runCli(["ping", "--dt", "0.2", "--broker", `${silentUrl},${nats.url}`], { env, timeoutMs: 60_000 });
    assert.doesNotMatch(r.stderr, /cannot reach the NATS broker/, r.stderr);
  };
  /** When the silent member was last recorded as not answering (ms), if it is. */
  const remembered = (): number | undefined => {
    try {
      return (JSON.parse(readFileSync(file, "utf8")) as Record<string, number>)[key];
    } catch {
      return undefined;
    }
  };
  // the members are tried in random order: until a command has picked the silent member (and
  // again whenever its 30 s have passed: under the suite's load a command can take seconds)
  const prime = () =>
    eventually(async () => {
      const before = dialled;
      await ping();
      return dialled > before ? true : undefined;
    }, 120_000, "a command that picked the silent member first");
  await prime();
  assert.deepEqual(Object.keys(JSON.parse(readFileSync(file, "utf8")) as object), [key]);
  // six commands that ran wholly within its 30 s: by chance alone each would pick it first one
  // time in two; one that ended past them is not judged
  const deadline = Date.now() + 300_000;
  let judged = 0;
  while (judged < 6) {
    assert.ok(Date.now() < deadline, `only ${judged} commands ran within the memory's 30 s in 300 s`);
    const since = remembered();
    if (since === undefined || Date.now() - since > 25_000) {
      await prime();
      continue;
    }
    const before = dialled;
    await ping();
    if (Date.now() - since >= 30_000) continue;
    assert.equal(dialled - before, 0, `the silent member was not dialled again (after ${judged} commands that passed it over)`);
    judged++;
  }
});
