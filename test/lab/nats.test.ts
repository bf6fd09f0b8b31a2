import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { startNats } from "../../src/lab/nats.js";
import { freePort } from "../../src/lab/ports.js";

// A nats-server that never listens where it was asked to is stopped when startNats gives up on it:
// nothing else knows of it, so nothing else would stop it (the lab's runner can only stop what a
// step hands back).

test("a broker that never listens on its port is stopped, not left running", { timeout: 30_000 }, async () => {
  const elsewhere = await freePort("127.0.0.1");
  // a second listen line wins over the generated one: nats-server runs, on another port
  await assert.rejects(startNats({ config: `listen: "127.0.0.1:${elsewhere}"\n`, jetstream: false }), /nothing listens on 127\.0\.0\.1:\d+ after 10000 ms/);
  // the port it did listen on is free again: it is gone
  const srv = createServer();
  await new Promise<void>((resolve, reject) => (srv.once("error", reject), srv.listen(elsewhere, "127.0.0.1", () => resolve())));
  await new Promise((r) => srv.close(r));
});
