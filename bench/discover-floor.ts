// The floor of `muster find`, as a whole process (bench/cli-start.ts): a bare NATS client that
// connects, publishes one discovery request and exits once N replies arrived. It counts replies
// and decodes nothing; the request bytes (a real signed discovery request, made fresh by the
// parent for each run) come from a file, so this process loads nothing of muster.
//
//   node dist/bench/discover-floor.js <broker-url> <subject> <request-file> <N>

import { readFileSync } from "node:fs";
import { connect, createInbox } from "@nats-io/transport-node";

const [url, subject, file, countText] = process.argv.slice(2);
const want = Number(countText);
if (!url || !subject || !file || !Number.isInteger(want) || want < 1) {
  process.stderr.write("usage: discover-floor.js <broker-url> <subject> <request-file> <N>\n");
  process.exit(64);
}
const nc = await connect({ servers: url, name: "bench-discover-floor" });
const inbox = createInbox();
let n = 0;
const deadline = setTimeout(() => {
  process.stderr.write(`discover-floor: ${n}/${want} replies after 60 s\n`);
  process.exit(1);
}, 60_000);
nc.subscribe(inbox, {
  callback: () => {
    if (++n !== want) return;
    clearTimeout(deadline);
    process.stdout.write(`${n}\n`);
    void nc.close().then(() => process.exit(0));
  },
});
nc.publish(subject, readFileSync(file), { reply: inbox });
