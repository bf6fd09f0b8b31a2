import { test } from "node:test";
import assert from "node:assert/strict";
import { hostsTemplateWith } from "../../src/lab/machines/hosts-template.js";

// The site's names in cloud-init's hosts template: the same text whether the image build bakes it
// in (the site's release) or a node of another release gets it in its own disk.

test("the site's names go after the image's template, which is kept whole, once each way it is written", () => {
  const image = "## template:jinja\n127.0.0.1 localhost\n\n";
  const lines = "10.77.2.1 nats1.lab nats1\n{% if hostname != \"puppet-us\" %}10.77.2.12 puppet-us.lab puppet-us{% endif %}";
  const out = hostsTemplateWith(image, lines);
  assert.ok(out.startsWith("## template:jinja\n127.0.0.1 localhost\n"));
  assert.ok(out.endsWith(`${lines}\n`));
  assert.equal(out.split("10.77.2.1 nats1.lab").length, 2, "each name once");
});
