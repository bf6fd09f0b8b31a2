import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { authorizationConfig } from "../../broker/auth.js";
import { brokerServerConfig } from "../../broker/server-config.js";
import { registryToken, webTokens } from "../credentials.js";
import { packagingFile } from "../machines/index.js";
import { labEnvironments } from "../manifests.js";
import { LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE } from "../names.js";
import { siteBrokerSpec, siteCredentials, type SiteCredentials } from "./credentials.js";
import { siteProvisionerConfigText } from "./render.js";
import { shortName, siteMachines, siteRoutes } from "./roles.js";

// What the operator prepares on the workstation before the site's machines boot (docs/deploy.md
// sections 2 to 7), in <lab>/site/: the credentials, who may connect to the brokers, each broker's
// nats-server.conf, the client-CA bundle, the provisioners' config, the registry's and the
// console's tokens; and the Puppet code the masters deploy (a tarball on the lab's package server).

export interface SiteFiles {
  dir: string;
  creds: SiteCredentials;
  /** muster broker users' output for these nodes. */
  users: string;
  /** muster broker config's output, by broker identity. */
  natsConfigs: Record<string, string>;
  /** The site CA and, once the masters have made theirs, every Puppet CA. */
  clientsCa: string;
  provisionerConfig: string;
  registryToken: string;
  webTokens: string;
}

/** The lab's pace on top of the package's defaults: a small fleet on a small machine. */
const LAB_PROVISIONER_PACE = {
  sleeptime: 2,
  concurrency: 4,
  per_master_limit: 2,
  retries: { attempts: 3, backoff: 1, max_backoff: 10 },
  // a provisioner that dies gives its nodes up to the other within a minute (issue 26 §4's fault),
  // or, mid Puppet run, once the run's own time is up too (lock_lease + puppet_timeout): a lab run
  // takes seconds to a minute on a busy machine, one against a master that is gone about two
  // minutes (Puppet's connect timeout); the provisioner's power-cut test waits this claim out
  lock_lease: 60,
  puppet_timeout: 180,
};

/** Make (or find) the site's files for these nodes; the receiver is where the notifier and the provisioners post. */
export function prepareSiteFiles(labDir: string, nodes: string[], receiverUrl: string): SiteFiles {
  const dir = join(resolve(labDir), "site");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const creds = siteCredentials(dir);
  const users = writeUsers(dir, nodes);
  const natsConfigs: Record<string, string> = {};
  for (const m of siteMachines().filter((x) => x.role === "broker")) {
    natsConfigs[m.identity] = join(dir, "nats", `${m.identity}.conf`);
    mkdirSync(dirname(natsConfigs[m.identity]!), { recursive: true });
    writeFileSync(natsConfigs[m.identity]!, brokerServerConfig({ serverName: shortName(m.identity), routes: siteRoutes(), maxFileStore: "4GB", maxMemoryStore: "64MB", syncInterval: "always" }));
  }
  const clientsCa = join(dir, "clients-ca.pem");
  if (!existsSync(clientsCa)) writeFileSync(clientsCa, readFileSync(creds.ca.cert));
  const provisionerConfig = join(dir, "provisioner.yaml");
  const packageDefault = parseYaml(readFileSync(packagingFile("etc/provisioner.yaml"), "utf8")) as Record<string, unknown>;
  writeFileSync(provisionerConfig, siteProvisionerConfigText({ ...packageDefault, ...LAB_PROVISIONER_PACE }, [receiverUrl]));
  return { dir, creds, users, natsConfigs, clientsCa, provisionerConfig, registryToken: registryToken(labDir), webTokens: webTokens(labDir) };
}

/** muster broker users for the site with these nodes (rewritten as nodes come and go). */
export function writeUsers(siteDir: string, nodes: string[]): string {
  const file = join(siteDir, "muster-users.conf");
  writeFileSync(file, authorizationConfig(siteBrokerSpec(nodes, LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE)));
  return file;
}

/** The site CA and these Puppet CA chains (PEM text), as the brokers' clients-ca.pem. */
export function writeClientsCa(files: SiteFiles, puppetCas: string[]): void {
  writeFileSync(files.clientsCa, [readFileSync(files.creds.ca.cert, "utf8").trim(), ...puppetCas.map((c) => c.trim())].join("\n") + "\n");
}

/**
 * The lab's Puppet code as a tarball of environments/ (what a master's --puppet-code unpacks into
 * /etc/puppet/code). The muster module is left out: each master links the one its package ships.
 */
export function writePuppetCode(out: string): string {
  const work = `${out}.d`;
  rmSync(work, { recursive: true, force: true });
  for (const [env, files] of Object.entries(labEnvironments())) {
    const root = join(work, "environments", env);
    mkdirSync(join(root, "manifests"), { recursive: true });
    writeFileSync(join(root, "manifests", "site.pp"), files.manifest);
    for (const [mod, modFiles] of Object.entries(files.modules ?? {})) {
      if (mod === "muster") continue;
      for (const [rel, text] of Object.entries(modFiles)) {
        const p = join(root, "modules", mod, rel);
        mkdirSync(dirname(p), { recursive: true });
        writeFileSync(p, text);
      }
    }
  }
  execFileSync("tar", ["-czf", out, "-C", work, "environments"]);
  rmSync(work, { recursive: true, force: true });
  return out;
}
