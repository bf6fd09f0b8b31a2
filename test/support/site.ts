import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { Site } from "../../src/lab/site/index.js";

/**
 * An environment for the CLI as the site's operator (`muster lab up --site`): the site's brokers
 * (the relays), the admin credential, the key every machine trusts; the client config is written
 * into `dir`. Site checks (test/lab/site-checks/) run commands with it.
 */
export function siteOperatorEnv(site: Site, dir: string): NodeJS.ProcessEnv {
  const s = site.state;
  const file = join(dir, "client.yaml");
  writeFileSync(file, toYaml({ brokers: s.site!.brokers, collective: s.collective, tls: s.tls.admin }));
  const env: NodeJS.ProcessEnv = { ...process.env, MUSTER_CONFIG: file, NO_COLOR: "1" };
  // the client config says it all; the test run's own broker and credential would come first
  for (const k of ["MUSTER_BROKER", "MUSTER_TLS_CA", "MUSTER_TLS_CERT", "MUSTER_TLS_KEY"]) delete env[k];
  return env;
}
