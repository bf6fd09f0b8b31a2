import { test } from "node:test";
import assert from "node:assert/strict";
import { mirrorSources, sourcesForRelease } from "../../src/lab/machines/mirror.js";
import { nodeSlot, siteSlot } from "../../src/lab/machines/addresses.js";
import { ancestors, checkPlan } from "../../src/lab/schedule.js";
import { planSite, SITE_ROLE_READY, SITE_STEP_NEEDS } from "../../src/lab/site/plan.js";
import { siteBrokerUrls, siteHostsLines, siteMachines, siteRoutes, SITE_ROLES } from "../../src/lab/site/roles.js";
import { siteBrokerSpec } from "../../src/lab/site/credentials.js";
import { STUCK_BOOT_MS, stuckBootAction } from "../../src/lab/site/reach.js";
import { brokerUsers } from "../../src/broker/auth.js";

// The site as data (issue 26 §1, §5): its machines' fixed names, where they sit, and the plan that
// brings it up, unit-tested without booting anything.

test("the site's machines have the names operators' scripts use, one role each, in their own slots", () => {
  const names = siteMachines().map((m) => `${m.role}:${m.identity}`);
  assert.deepEqual(names, ["broker:nats1.lab", "broker:nats2.lab", "broker:nats3.lab", "master:puppet-eu.lab", "master:puppet-us.lab", "provisioner:provisioner1.lab", "provisioner:provisioner2.lab", "console:console.lab"]);
  const addresses = siteMachines().map((m) => m.address);
  assert.equal(new Set(addresses).size, addresses.length, "one address each");
  for (const m of siteMachines()) {
    assert.match(m.address, /^10\.77\.2\.\d+$/, "the site's own subnet, apart from the nodes' 10.77.1.0/24");
    assert.equal(m.slot.address, m.address);
    assert.match(m.hostAlias, /^127\.0\.3\.\d+$/, "the workstation reaches it on loopback");
  }
  // a node's slot and a site machine's never collide, however many nodes
  const nodeSlots = Array.from({ length: 254 }, (_, i) => nodeSlot(i + 1));
  for (const m of siteMachines()) assert.ok(!nodeSlots.some((n) => n.address === m.address || n.name === m.slot.name || n.mac === m.slot.mac || n.sshAlias === m.hostAlias), m.identity);
  assert.throws(() => siteSlot(0), /1 to 254/);
  // each masters' region is one of the lab's, as the provisioner picks by
  assert.deepEqual(siteMachines().filter((m) => m.role === "master").map((m) => m.region?.country), ["de", "us"]);
});

test("every role says what it installs, runs, and what up means for it", () => {
  for (const role of Object.keys(SITE_ROLES) as (keyof typeof SITE_ROLES)[]) {
    assert.ok(SITE_ROLES[role].units.length > 0, role);
    assert.ok(SITE_ROLE_READY[role], `${role} has a readiness step`);
  }
  assert.ok(SITE_ROLE_READY.node);
  assert.deepEqual(siteBrokerUrls(), ["tls://nats1.lab:4222", "tls://nats2.lab:4222", "tls://nats3.lab:4222"]);
  assert.deepEqual(siteRoutes(), ["nats-route://nats1.lab:6222", "nats-route://nats2.lab:6222", "nats-route://nats3.lab:6222"]);
  assert.equal(siteHostsLines().split("\n").length, siteMachines().length, "the hosts template names every site machine");
});

test("the plan: brokers boot first; the brokers trust the masters once both are up; PuppetDB starts beside the masters; the fleet is waited for after that", () => {
  const plan = planSite({ nodes: 4, suite: "trixie", kind: "nspawn" });
  assert.deepEqual(checkPlan(plan, SITE_STEP_NEEDS), []);
  const boots = plan.filter((s) => s.kind === "boot-site-machine" || s.kind === "boot-site-node").map((s) => s.id);
  assert.deepEqual(boots.slice(0, 3), ["boot nats1.lab", "boot nats2.lab", "boot nats3.lab"]);
  assert.equal(boots.length, siteMachines().length + 4);
  const before = (id: string) => ancestors(plan, id);
  for (const b of ["up nats1.lab", "up nats2.lab", "up nats3.lab"]) assert.ok(before("wait-brokers").has(b));
  for (const m of ["up puppet-eu.lab", "up puppet-us.lab", "wait-brokers"]) assert.ok(before("trust-masters").has(m), m);
  assert.ok(before("wait-fleet").has("trust-masters"), "masters connect once the brokers trust their CA... and the brokers must be up");
  // PuppetDB starts while the masters' puppetservers do: it waits for the console, not for the
  // masters to be up; the site is up once it serves
  assert.ok(before("state-up").has("site-puppetdb"), "the site is up once PuppetDB serves");
  assert.ok(before("site-puppetdb").has("up console.lab"));
  assert.ok(!before("site-puppetdb").has("up puppet-eu.lab") && !before("site-puppetdb").has("up puppet-us.lab"), "PuppetDB does not wait for the masters' puppetservers");
  // lab.json names every machine before anything is waited for
  for (const w of plan.filter((s) => ["machine-up", "wait-brokers", "wait-provisioning", "wait-console"].includes(s.kind))) assert.ok(before(w.id).has("state"), w.id);
  const nodeWait = plan.find((s) => s.kind === "wait-provisioning")!;
  assert.deepEqual((nodeWait.args as { identities: string[] }).identities, ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"]);
  // the last step saves lab.json again, after everything was waited for
  assert.equal(plan.at(-1)!.kind, "save-state");
});

test("the broker users: nodes by certname and bootstrap credential, the masters' and notifier's muster servers, each service", () => {
  const users = brokerUsers(siteBrokerSpec(["node01.eu.lab"], "muster", "provisioning")).map((u) => u.user);
  for (const u of ["CN=node01.eu.lab", "CN=puppet-eu.lab,OU=node,O=muster", "CN=puppet-us.lab,OU=node,O=muster", "CN=console.lab,OU=node,O=muster", "CN=provisioner,OU=service,O=muster", "CN=registry,OU=service,O=muster", "CN=console,OU=service,O=muster", "CN=admin,OU=service,O=muster"]) assert.ok(users.includes(u), u);
  assert.ok(users.some((u) => /CN=node01\.eu\.lab,OU=bootstrap/.test(u)), "the node's own bootstrap user");
});

test("the lab's Debian mirror: the image's only apt source, per release; another release's sources come from the host's mirror", () => {
  const text = mirrorSources("http://10.77.0.1:8080/", "trixie");
  assert.match(text, /^URIs: http:\/\/10\.77\.0\.1:8080\/debian\/trixie$/m);
  assert.match(text, /^Suites: trixie$/m);
  assert.match(text, /^Signed-By: \/etc\/apt\/keyrings\/muster-lab-debian\.asc$/m);
  const host = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n";
  const t = sourcesForRelease(host, "bookworm", "trixie");
  assert.match(t, /Suites: trixie trixie-updates\n/);
  assert.match(t, /Suites: trixie-security\n/);
  assert.ok(!t.includes("bookworm"));
  assert.equal(sourcesForRelease(host, "bookworm", "bookworm"), host);
  assert.equal(sourcesForRelease("deb http://deb.debian.org/debian bookworm main\n", "bookworm", "trixie"), "deb http://deb.debian.org/debian trixie main\n");
});

test("a boot that started no cloud-init stage for minutes is rebooted once; one still coming up, or rebooted already, is waited for", () => {
  const t = 1_000_000;
  assert.equal(stuckBootAction(undefined, t, false), "wait", "cloud-init started (or the machine does not answer)");
  assert.equal(stuckBootAction(t, t + 30_000, false), "wait", "the first seconds of every boot say 'not started'");
  assert.equal(stuckBootAction(t, t + STUCK_BOOT_MS, false), "wait");
  assert.equal(stuckBootAction(t, t + STUCK_BOOT_MS + 1, false), "reboot");
  assert.equal(stuckBootAction(t, t + 10 * STUCK_BOOT_MS, true), "wait", "once: a second stuck boot is the deadline's to report");
});
