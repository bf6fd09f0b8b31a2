import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import { brokerServerConfig } from "../../src/broker/server-config.js";
import { masterUserData } from "../../src/config/cloud-init.js";
import { caClientName, masterServerConfig, provisionerAdditions, registryConfig, webConfig } from "../../src/config/site.js";
import { puppetDbTlsScript } from "../../src/config/puppetdb-site.js";
import { siteMachines } from "../../src/lab/site/roles.js";
import { siteRenderArgv, type SiteRenderContext } from "../../src/lab/site/render.js";
import type { SiteCredentials } from "../../src/lab/site/credentials.js";
import { repoRoot } from "../support/collective.js";
import { textBlockLines } from "../support/doc-commands.js";

// docs/deploy.md is what the site runs (issue 26): every config block it marks `<!-- rendered: ID -->`
// is what the generator behind that file prints for the doc's example values, and every
// `muster user-data --role R` command it shows has the flags the lab's site machines
// of that role are rendered with (`muster lab up --site`).

const doc = readFileSync(join(repoRoot, "docs", "deploy.md"), "utf8");
const EXAMPLE_BROKERS = ["tls://nats1.example.net:4222", "tls://nats2.example.net:4222", "tls://nats3.example.net:4222"];
const EXAMPLE_MASTERS = [
  { identity: "puppet-eu.example.net", facts: { ec2_placement_region: "eu-central-1", country: "de" } },
  { identity: "puppet-us.example.net", facts: { ec2_placement_region: "us-east-1", country: "us" } },
];

/** The block after `<!-- rendered: id -->`: its fence's language and its text. */
function rendered(id: string): { lang: string; text: string } {
  const m = new RegExp(`<!-- rendered: ${id} -->\\n\`\`\`(\\w*)\\n([\\s\\S]*?)\`\`\`\\n`).exec(doc);
  assert.ok(m, `docs/deploy.md has no block marked <!-- rendered: ${id} -->`);
  return { lang: m[1]!, text: m[2]! };
}

const shellQuote = (a: string) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);

test("§3: the nats-server.conf shown is muster broker config's for the command shown", () => {
  const cmd = /muster broker config ([^>]*)>/.exec(doc.replace(/\\\n\s*/g, ""))?.[1];
  assert.ok(cmd, "the broker section shows muster broker config");
  const args = cmd.trim().split(/\s+/);
  const routes = args.flatMap((a, i) => (args[i - 1] === "--route" ? [a] : []));
  const name = args[args.indexOf("--name") + 1]!;
  const flag = (f: string) => (args.includes(f) ? args[args.indexOf(f) + 1] : undefined);
  const [maxFile, sync] = [flag("--max-file-store"), flag("--sync-interval")];
  assert.equal(sync, "always", "the guide's brokers sync each write");
  assert.equal(rendered("broker-config").text, brokerServerConfig({ serverName: name, routes, ...(maxFile ? { maxFileStore: maxFile } : {}), ...(sync ? { syncInterval: sync } : {}) }));
});

test("§5: the master's server.yaml and its setup commands are the generator's", () => {
  const yaml = rendered("master-server");
  assert.equal(yaml.lang, "yaml");
  const example = { identity: "puppet-eu.example.net", brokers: EXAMPLE_BROKERS, collective: "muster", provisionerKey: "PROVISIONER_PUBLIC_KEY", trustedKeys: [{ name: "user=ops", key: "OPS_PUBLIC_KEY" }] };
  assert.deepEqual(parseYaml(yaml.text), masterServerConfig({ ...example, nodeKey: true }));
  const u = masterUserData({
    ...example,
    source: { apt: { repo: "https://apt.example.net/muster", keyText: "", suite: "stable" } },
    caText: "",
    certText: "",
    keyText: "",
    facts: {},
    altNames: ["IP:192.0.2.11"],
    registry: { url: "http://console.example.net:8089", tokenText: "" },
    puppetCodeUrl: "https://code.example.net/puppet-code.tar.gz",
    heap: "2g",
    javaArgs: ["-XX:TieredStopAtLevel=1"],
    nodeKeyText: "",
    puppetdbUrl: "https://puppetdb-eu.example.net:8081",
  });
  assert.equal(rendered("master-runcmd").text, `${u.runcmd.map((c) => c.map(shellQuote).join(" ")).join("\n")}\n`);
});

test("§6: the provisioners' additions are the generator's", () => {
  const y = rendered("provisioner-additions");
  assert.deepEqual(parseYaml(y.text), parseYaml(toYaml(provisionerAdditions({ brokers: EXAMPLE_BROKERS, notifyTargets: ["https://hooks.example.net/provisioning", "mailto:ops@example.net"], masters: EXAMPLE_MASTERS }))));
});

test("§7: the registry's and the console's configs are the generators'", () => {
  assert.deepEqual(parseYaml(rendered("registry-config").text), registryConfig({ brokers: EXAMPLE_BROKERS, collective: "muster", replicas: 3, puppetdb: true }));
  assert.deepEqual(parseYaml(rendered("web-config").text), webConfig({ brokers: EXAMPLE_BROKERS, collective: "muster" }));
});

test("§10: PuppetDB's TLS script is the generator's, for the doc's two masters", () => {
  const names = ["puppetdb-eu.example.net", "puppetdb-us.example.net"];
  const allow = ["puppet-eu.example.net", "puppet-us.example.net"].flatMap((m) => [m, caClientName(m)]);
  assert.equal(rendered("puppetdb-tls").text, puppetDbTlsScript({ names, allow }));
  // and the names the copying commands give the files are the ones the script reads
  for (const n of names) assert.match(doc, new RegExp(`puppetdb-tls/${n.replace("eu", "\\$r").replace("us", "\\$r").replace(/\./g, "\\.")}\\.(pem|key)`));
});

test("every --role command in docs/deploy.md has the flags the lab renders that role's machines with", () => {
  const creds = { ca: { cert: "/c/ca.pem" }, brokers: new Proxy({}, { get: () => ({ cert: "/c/b.pem", key: "/c/b.key" }) }), masters: new Proxy({}, { get: () => ({ cert: "/c/m.pem", key: "/c/m.key" }) }), provisioner: { cert: "/c/p.pem", key: "/c/p.key" }, registry: { cert: "/c/r.pem", key: "/c/r.key" }, console: { cert: "/c/c.pem", key: "/c/c.key" }, notifier: { cert: "/c/n.pem", key: "/c/n.key" }, https: { cert: "/c/h.pem", key: "/c/h.key" }, keys: { provisioner: { file: "/k/provisioner.pem", publicKey: "P" }, console: { file: "/k/console.pem", publicKey: "C" } }, nodeKeys: new Proxy({}, { get: () => ({ file: "/k/node.pem", pub: "/k/node.pub", publicKey: "N" }) }) } as unknown as SiteCredentials;
  const ctx: SiteRenderContext = {
    creds,
    aptRepo: "http://10.77.0.1:8080/apt",
    aptKey: "/lab/key.asc",
    brokerFiles: () => ({ natsConfig: "/n.conf", users: "/u.conf", clientsCa: "/ca.pem" }),
    puppetCodeUrl: "http://10.77.0.1:8080/code.tar.gz",
    registryToken: "/t",
    webTokens: "/w",
    provisionerConfig: "/p.yaml",
    operator: { name: "user=root", key: "K" },
    notifyRecipients: ["http://10.77.0.1:9999/"],
    sshPublicKey: "ssh-ed25519 AAAA lab",
    puppetserverHeap: "768m",
  };
  const squash = (flags: string[]) => flags.filter((f, i) => f !== flags[i - 1]);
  // every command line (continuations joined) of every text block that renders a role
  const commands = textBlockLines(doc).flatMap((l) => {
    const m = /^muster user-data --role (\w+)(.*)$/.exec(l);
    return m ? [[l, m[1]!] as const] : [];
  });
  const roles = new Set<string>();
  for (const [block, role] of commands) {
    const m = siteMachines().find((x) => x.role === role);
    if (!m) continue;
    roles.add(role!);
    const docFlags = squash([...block!.matchAll(/(?:^|\s)(--[a-z-]+)/g)].map((x) => x[1]!));
    const lab = squash(siteRenderArgv(ctx, m).filter((a) => a.startsWith("--")));
    assert.deepEqual(lab, docFlags, `--role ${role}: the lab's command is the operators' command`);
  }
  for (const r of ["broker", "master", "provisioner", "console"]) assert.ok(roles.has(r), `docs/deploy.md shows the --role ${r} command`);
});
