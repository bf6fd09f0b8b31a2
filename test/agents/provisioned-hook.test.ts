import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { createProvisionAgent, isProvisioned } from "../../src/agents/provision/index.js";
import { isProvisioned as nodeIsProvisioned } from "../../src/agents/node.js";
import { tempDir } from "../support/collective.js";
import { makeContext } from "../support/context.js";

// The provision agent's "provisioned" hook: the server learns from the agent, not from its files,
// that the node is provisioned (and switches from provisioning isolation to production on it).

const tmp = tempDir("provisioned-hook");
after(() => tmp.remove());

test("onProvisioned fires once, when disable_provisioner marks the node, after the event is emitted", async () => {
  const config = { disable_file: join(tmp.path, "disabled"), lock_file: join(tmp.path, "lock") };
  const order: string[] = [];
  const ctx = makeContext({ identity: "web1.test", agent: "provision", config, emit: (event) => order.push(`emit ${event}`) });
  const agent = createProvisionAgent({ config, identity: "web1.test", onProvisioned: () => order.push("provisioned") });
  assert.equal(isProvisioned(config, "web1.test"), false);
  assert.equal(await nodeIsProvisioned({ identity: "web1.test", plugins: { provision: config } }), false);

  assert.deepEqual(await agent.actions.disable_provisioner({ reason: "done" }, ctx), { disabled: true, disable_file: config.disable_file });
  assert.deepEqual(order, ["emit disabled", "provisioned"]);
  await agent.actions.disable_provisioner({}, ctx); // again: already provisioned, no second switch
  assert.deepEqual(order, ["emit disabled", "provisioned", "emit disabled"]);

  assert.equal(isProvisioned(config, "web1.test"), true, "a restarted server asks and is told");
  assert.equal(await nodeIsProvisioned({ identity: "web1.test", plugins: { provision: config } }), true);
});
