import type { EnvironmentFiles } from "./puppetserver.js";

// The lab's Puppet code. The bootstrap environment records the lifecycle stage it saw; production
// manages a file with known content. Both write under the node's own directory (fact muster_node_dir),
// so many lab nodes share one machine without touching each other or the host; without that fact
// the catalog fails rather than write to /.

export const BOOTSTRAP_SITE = `# muster lab: bootstrap stage
node default {
  if !$facts['muster_node_dir'] { fail('fact muster_node_dir is missing: refusing to manage files outside the lab node') }
  file { "\${facts['muster_node_dir']}/bootstrap-stage":
    ensure  => file,
    content => "lifecycle_stage=\${facts['lifecycle_stage']}\\n",
  }
}
`;

export const PRODUCTION_SITE = `# muster lab: production
node default {
  if !$facts['muster_node_dir'] { fail('fact muster_node_dir is missing: refusing to manage files outside the lab node') }
  file { "\${facts['muster_node_dir']}/motd":
    ensure  => file,
    content => "\${trusted['certname']} is managed by Puppet (country \${facts['country']}, stage \${facts['lifecycle_stage']})\\n",
  }
}
`;

export function labEnvironments(): Record<string, EnvironmentFiles> {
  return { bootstrap: { manifest: BOOTSTRAP_SITE }, production: { manifest: PRODUCTION_SITE } };
}

/** The content the production run must leave in <node dir>/motd. */
export function expectedMotd(identity: string, country: string): string {
  return `${identity} is managed by Puppet (country ${country}, stage production)\n`;
}
