import { test } from "node:test";
import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { brokerUserData, consoleUserData, masterUserData, type UserData } from "../../src/config/cloud-init.js";
import { renderUserDataFromFlags } from "../../src/cli/commands/user-data.js";
import { SITE_NODE_KEY } from "../../src/config/site.js";

// What the site's user-data does, in order (issue 40): a master's certname is its identity before
// any certificate is made, and its muster server asks its CA by loopback checking that name; a
// broker's nats-server starts once, with its key readable, never at package install; a site
// machine's node key, made on the workstation, is the muster server's, readable by its group only.

const source = { apt: { repo: "https://apt.example.net/muster", keyText: "KEY", suite: "stable" } };
const line = (u: UserData) => u.runcmd.map((c) => c.join(" "));
const at = (u: UserData, re: RegExp) => {
  const i = line(u).findIndex((c) => re.test(c));
  assert.ok(i >= 0, `no command matching ${re} in:\n${line(u).join("\n")}`);
  return i;
};
const master = (o: { nodeKeyText?: string } = {}) =>
  masterUserData({ identity: "puppet-eu.example.net", source, brokers: ["tls://nats1.example.net:4222"], collective: "muster", caText: "CA", certText: "C", keyText: "K", provisionerKey: "P", trustedKeys: [], facts: {}, altNames: ["IP:192.0.2.11"], ...o });

test("a master's certname is set to its identity in puppet.conf before its CA and certificate are made, whatever its host name", () => {
  const u = master();
  const set = at(u, /^puppet config set --section main certname puppet-eu\.example\.net$/);
  assert.ok(set > at(u, /apt-get install .*puppetserver/), "once Puppet is installed");
  assert.ok(set < at(u, /^puppetserver ca setup --certname puppet-eu\.example\.net /), "before the CA and the master's certificate");
  assert.ok(set < at(u, /^systemctl enable --now puppetserver/), "before puppetserver first starts");
});

test("a master's muster server asks its CA by loopback and checks the certificate for its identity", () => {
  const cfg = parseYaml(master().write_files.find((f) => f.path === "/etc/muster/server.yaml")!.content) as { plugins: { puppetca: Record<string, string> } };
  assert.equal(cfg.plugins.puppetca.url, "https://127.0.0.1:8140");
  assert.equal(cfg.plugins.puppetca.servername, "puppet-eu.example.net");
});

test("a node key made on the workstation is the muster server's, root's at write, then its group's 0640; none given, the server makes its own", () => {
  const u = master({ nodeKeyText: "NODE KEY PEM" });
  const f = u.write_files.find((x) => x.path === SITE_NODE_KEY);
  assert.equal(f?.content, "NODE KEY PEM");
  assert.equal(f?.permissions, "0600");
  assert.ok(u.runcmd.some((c) => c[0] === "chgrp" && c[1] === "muster" && c.includes(SITE_NODE_KEY)));
  assert.ok(u.runcmd.some((c) => c[0] === "chmod" && c[1] === "0640" && c.includes(SITE_NODE_KEY)));
  const cfg = parseYaml(u.write_files.find((x) => x.path === "/etc/muster/server.yaml")!.content) as { security: { node_key?: string } };
  assert.equal(cfg.security.node_key, SITE_NODE_KEY);
  const without = master();
  assert.ok(!without.write_files.some((x) => x.path === SITE_NODE_KEY));
  assert.equal((parseYaml(without.write_files.find((x) => x.path === "/etc/muster/server.yaml")!.content) as { security: { node_key?: string } }).security.node_key, undefined);
});

test("a broker's nats-server starts once, after its key is the nats user's: no service starts while the package installs", () => {
  const u = brokerUserData({ identity: "nats1.example.net", natsConfigText: "N", usersText: "U", certText: "C", keyText: "K", caText: "CA", clientsCaText: "CC" });
  const policy = u.write_files.find((f) => f.path === "/usr/sbin/policy-rc.d");
  assert.equal(policy?.permissions, "0755");
  assert.match(policy!.content, /^#!\/bin\/sh\n[\s\S]*exit 101\n$/);
  const install = at(u, /apt-get install .*nats-server/);
  const lifted = at(u, /^rm -f \/usr\/sbin\/policy-rc\.d$/);
  const key = at(u, /^chgrp nats \/etc\/nats\/server\.key$/);
  const start = at(u, /^systemctl enable --now nats-server\.service$/);
  assert.ok(install < lifted && lifted < start, "the policy holds during the install only");
  assert.ok(key < start && at(u, /^chmod 0640 \/etc\/nats\/server\.key$/) < start, "the key is readable before the first start");
  assert.ok(!line(u).some((c) => /restart/.test(c)), "started once, not restarted");
});

const tls = { certText: "C", keyText: "K" };
const consoleWith = (o: { puppetdb?: boolean; puppetdbJavaArgs?: string[] }) =>
  consoleUserData({ identity: "console.example.net", source, brokers: ["tls://nats1.example.net:4222"], collective: "muster", caText: "CA", registry: tls, console: tls, notifier: tls, https: tls, registryTokenText: "T", webTokensText: "W", signingKeyText: "S", provisionerKey: "P", trustedKeys: [], recipients: [], replicas: 3, ...o });

test("PuppetDB's JVM options go into /etc/default/puppetdb once the package is in and before its first start; none given, Debian's file is left as it is", () => {
  const u = consoleWith({ puppetdb: true, puppetdbJavaArgs: ["-XX:TieredStopAtLevel=1", "-Xmx512m"] });
  const sed = at(u, /^sed -i -E s\/\^JAVA_ARGS="\/JAVA_ARGS="-XX:TieredStopAtLevel=1 -Xmx512m \/ \/etc\/default\/puppetdb$/);
  assert.ok(sed > at(u, /apt-get install .*puppetdb/), "after the package wrote the file");
  assert.ok(sed < at(u, /^systemctl unmask puppetdb\.service$/) && sed < at(u, /^systemctl enable postgresql\.service puppetdb\.service$/), "before PuppetDB first starts");
  assert.ok(!line(consoleWith({ puppetdb: true })).some((c) => c.includes("/etc/default/puppetdb")));
});

test("--puppetdb-java-arg: one JVM option each, for the console's own PuppetDB only; anything else is refused saying why", async () => {
  const arg = ["--puppetdb-java-arg", "-XX:TieredStopAtLevel=1"];
  await assert.rejects(renderUserDataFromFlags(["--role", "console", ...arg]), /--puppetdb-java-arg needs --puppetdb local/);
  await assert.rejects(renderUserDataFromFlags(["--role", "console", "--puppetdb", "local", "--puppetdb-java-arg", "-Xmx1g; rm -rf /"]), /--puppetdb-java-arg takes one JVM option/);
  await assert.rejects(renderUserDataFromFlags(["--role", "master", ...arg]), /--puppetdb-java-arg/);
});
