// Preloaded with `node --import` (test/cli/help.test.ts): records which npm packages a process
// loads and prints them, sorted, on stderr at exit as `loaded-packages: a b c`. It resolves through
// a module hook, so it sees static and dynamic imports alike.
import { register } from "node:module";
import { MessageChannel } from "node:worker_threads";

const { port1, port2 } = new MessageChannel();
const seen = new Set<string>();
port1.on("message", (url: string) => {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) seen.add(m[1]!);
});
port1.unref();
register("./loaded-packages-hook.js", import.meta.url, { data: { port: port2 }, transferList: [port2] });
process.on("exit", () => process.stderr.write(`loaded-packages: ${[...seen].sort().join(" ")}\n`));
