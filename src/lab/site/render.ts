import { stringify as toYaml } from "yaml";
import { provisionerAdditions } from "../../config/site.js";
import { USER_DATA_COMMAND } from "../machines/index.js";
import { puppetDbUrl, SITE_PORTS, siteBrokerUrls, siteMachines, type SiteMachine } from "./roles.js";
import type { SiteCredentials } from "./credentials.js";

// The command lines that render each site machine's user-data: docs/deploy.md's commands, flag for
// flag, with the lab's values (test/docs/deploy.test.ts holds the two together). Pure.

export interface SiteRenderContext {
  creds: SiteCredentials;
  /** muster's apt repository as machines reach it, and its public key (a file). */
  aptRepo: string;
  aptKey: string;
  /** The files the operator made for the brokers: muster broker config per member, muster broker users. */
  brokerFiles: (identity: string) => { natsConfig: string; users: string; clientsCa: string };
  /** The Puppet code tarball as masters reach it. */
  puppetCodeUrl: string;
  /** The registry's token file, and the console's tokens file. */
  registryToken: string;
  webTokens: string;
  /** The provisioners' config file. */
  provisionerConfig: string;
  /** Who the console's notifier tells (the lab's webhook receiver, as machines reach it). */
  notifyRecipients: string[];
  /** The operator's caller name and public key: every machine obeys them too. */
  operator: { name: string; key: string };
  sshPublicKey: string;
  /** The heap each puppetserver gets (a lab machine shares 2 cores and little memory). */
  puppetserverHeap: string;
}

const brokerFlags = () => siteBrokerUrls().flatMap((b) => ["--broker", b]);

/** The renderer's argv for one site machine: `muster user-data ...` (argv[0] is the subcommand). */
export function siteRenderArgv(c: SiteRenderContext, m: SiteMachine): string[] {
  const apt = ["--apt-repo", c.aptRepo, "--apt-key", c.aptKey];
  const ssh = ["--ssh-authorized-key", c.sshPublicKey];
  const operator = ["--trusted-key", `${c.operator.name}=${c.operator.key}`];
  const cr = c.creds;
  switch (m.role) {
    case "broker": {
      const f = c.brokerFiles(m.identity);
      const b = cr.brokers[m.identity]!;
      return [USER_DATA_COMMAND, "--role", "broker", "--identity", m.identity, "--nats-config", f.natsConfig, "--users", f.users, "--cert", b.cert, "--key", b.key, "--ca", cr.ca.cert, "--clients-ca", f.clientsCa, ...ssh];
    }
    case "master": {
      const mc = cr.masters[m.identity]!;
      const r = m.region!;
      const consoleMachine = siteMachines().find((x) => x.role === "console")!;
      return [
        USER_DATA_COMMAND,
        "--role",
        "master",
        "--identity",
        m.identity,
        ...apt,
        ...brokerFlags(),
        "--ca",
        cr.ca.cert,
        "--cert",
        mc.cert,
        "--key",
        mc.key,
        "--provisioner-key",
        cr.keys.provisioner.publicKey,
        ...operator,
        "--fact",
        `country=${r.country}`,
        "--fact",
        `ec2_placement_region=${r.region}`,
        "--node-key",
        cr.nodeKeys[m.identity]!.file,
        "--alt-name",
        `IP:${m.address}`,
        "--registry-url",
        `http://${consoleMachine.identity}:${SITE_PORTS.registry}`,
        "--registry-token",
        c.registryToken,
        "--puppet-code",
        c.puppetCodeUrl,
        "--puppetserver-heap",
        c.puppetserverHeap,
        // a lab master compiles few catalogs: C1 alone starts the JVM far sooner (as the host lab's masters do)
        "--puppetserver-java-arg",
        "-XX:TieredStopAtLevel=1",
        "--puppetdb-url",
        puppetDbUrl(r),
        ...ssh,
      ];
    }
    case "provisioner":
      return [USER_DATA_COMMAND, "--role", "provisioner", "--identity", m.identity, ...apt, "--config", c.provisionerConfig, "--ca", cr.ca.cert, "--cert", cr.provisioner.cert, "--key", cr.provisioner.key, "--signing-key", cr.keys.provisioner.file, ...ssh];
    case "console":
      return [
        USER_DATA_COMMAND,
        "--role",
        "console",
        "--identity",
        m.identity,
        ...apt,
        ...brokerFlags(),
        "--ca",
        cr.ca.cert,
        "--registry-cert",
        cr.registry.cert,
        "--registry-key",
        cr.registry.key,
        "--console-cert",
        cr.console.cert,
        "--console-key",
        cr.console.key,
        "--notifier-cert",
        cr.notifier.cert,
        "--notifier-key",
        cr.notifier.key,
        "--https-cert",
        cr.https.cert,
        "--https-key",
        cr.https.key,
        "--registry-token",
        c.registryToken,
        "--web-tokens",
        c.webTokens,
        "--signing-key",
        cr.keys.console.file,
        "--provisioner-key",
        cr.keys.provisioner.publicKey,
        ...operator,
        "--node-key",
        cr.nodeKeys[m.identity]!.file,
        ...c.notifyRecipients.flatMap((r) => ["--notify-recipient", r]),
        "--replicas",
        "3",
        "--puppetdb",
        "local",
        // as the masters: C1 alone, PuppetDB's start (its Clojure compiled from source) on about 0.6 of the CPU
        "--puppetdb-java-arg",
        "-XX:TieredStopAtLevel=1",
        ...ssh,
      ];
  }
}

/**
 * The site provisioners' /etc/muster/provisioner.yaml: the package's default (mcprovision's keys)
 * with the site's additions (docs/deploy.md#5-provisioners-two-for-ha) and the lab's pace.
 */
export function siteProvisionerConfigText(packageDefault: Record<string, unknown>, notifyTargets: string[]): string {
  const masters = siteMachines()
    .filter((m) => m.role === "master")
    .map((m) => ({ identity: m.identity, facts: { ec2_placement_region: m.region!.region, country: m.region!.country } }));
  const additions = provisionerAdditions({ brokers: siteBrokerUrls(), notifyTargets, masters });
  const base = packageDefault as { notify?: Record<string, unknown>; master?: Record<string, unknown> };
  return toYaml({ ...packageDefault, ...additions, notify: { ...(base.notify ?? {}), ...(additions.notify as Record<string, unknown>) }, master: { ...(base.master ?? {}), ...(additions.master as Record<string, unknown>) } });
}
