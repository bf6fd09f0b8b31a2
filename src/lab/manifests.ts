import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import type { EnvironmentFiles } from "./puppetserver.js";
import { labNrpeConfig } from "./nrpe.js";

// The lab's Puppet code: a small site in the style of the blog posts muster comes from.
//
// - Each node has a role (fact role) that the site maps to a class: role::web, role::db
//   (with mysql::master or mysql::slave by fact mysql_role) or role::monitor, and a customer and
//   environment (facts). labRole() assigns them by node index, the same way every time.
// - Every role class registers itself in the motd (motd::register, as in the blog), so the motd
//   lists the node's roles; removing a class removes its line.
// - webapp (on role::web) finds the database master of its own customer and environment with
//   search_nodes (puppet/modules/muster, shipped in the repository) and writes it into a config
//   file it manages. mysql::slave finds its master the same way; role::monitor lists the nodes
//   to monitor with full records.
// - Classes that need the fleet (search_nodes) or a finished machine (mysql) are not
//   bootstrap-aware: both environments carry the same code and leave them out while
//   $facts['lifecycle_stage'] is 'bootstrap', as the CoreOS two-stage bootstrap does.
//
// On a process node (fact muster_lab) everything is written under the node's own directory (fact
// muster_node_dir), so many lab nodes share one host without touching each other or it; without
// that fact the catalog fails rather than write to /. On a machine (a lab machine, or one booted
// from docs/deploy.md's own user-data, which knows nothing of the lab) the same classes manage the
// real system: /etc/motd, /etc/webapp/webapp.conf, and each server role's
// user and systemd service, which Puppet installs and keeps running. lab::paths says where.
// Which node has which role is data: roles.ts.

/** Where `muster resource` may put files on a lab machine (the site below makes the directory). */
export const MACHINE_FILES_DIR = "/srv/muster-lab/files";

const NODE_DIR_GUARD = "if !$facts['muster_node_dir'] { fail('fact muster_node_dir is missing: refusing to manage files outside the lab node') }";

/** Machine: the system's own paths. Process node: its directory on the shared host. */
const LAB_PATHS = `class lab::paths {
  if !$facts['muster_lab'] {
    $machine      = true
    $motd         = '/etc/motd'
    $motd_dir     = '/etc/muster-lab/motd.d'
    $stage_marker = '/var/lib/muster-lab/bootstrap-stage'
    $webapp_conf  = '/etc/webapp/webapp.conf'
    $my_cnf       = '/etc/mysql/my.cnf'
    $monitored    = '/etc/muster-lab/monitored-nodes'
    file { ['/etc/muster-lab', '/var/lib/muster-lab', '/etc/webapp', '/etc/mysql', '/srv/muster-lab', '${MACHINE_FILES_DIR}']: ensure => directory }
  } else {
    ${NODE_DIR_GUARD}
    $dir          = $facts['muster_node_dir']
    $machine      = false
    $motd         = "\${dir}/motd"
    $motd_dir     = "\${dir}/motd.d"
    $stage_marker = "\${dir}/bootstrap-stage"
    $webapp_conf  = "\${dir}/webapp.conf"
    $my_cnf       = "\${dir}/my.cnf"
    $monitored    = "\${dir}/monitored-nodes"
  }
}
`;

/**
 * A role's server on a machine: its own system user and a systemd unit Puppet installs and keeps
 * running (a small HTTP server from Python's standard library stands in for the real daemon).
 */
const LAB_SERVICE = `define lab::service(String $user, Integer $port, String $description) {
  user { $user:
    ensure     => present,
    system     => true,
    home       => "/srv/muster-lab/\${title}",
    managehome => true,
    shell      => '/usr/sbin/nologin',
  }
  file { "/srv/muster-lab/\${title}/index.html":
    ensure  => file,
    owner   => $user,
    content => "\${title} on \${trusted['certname']}\n",
    require => User[$user],
  }
  file { "/etc/systemd/system/\${title}.service":
    ensure  => file,
    content => "# managed by Puppet (lab::service)\n[Unit]\nDescription=\${description}\nAfter=network.target\n\n[Service]\nUser=\${user}\nExecStart=/usr/bin/python3 -m http.server \${port} --directory /srv/muster-lab/\${title}\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n",
  }
  service { $title:
    ensure    => running,
    enable    => true,
    subscribe => File["/etc/systemd/system/\${title}.service"],
    require   => File["/srv/muster-lab/\${title}/index.html"],
  }
}
`;

/** On a machine, the NRPE commands muster's nrpe agent runs (nrpe.d, as NRPE's own package reads it). */
const labNrpe = (commands: string) => `class lab::nrpe {
  include lab::paths
  if $lab::paths::machine {
    file { ['/etc/nagios', '/etc/nagios/nrpe.d']: ensure => directory }
    file { '/etc/nagios/nrpe.d/lab.cfg':
      ensure  => file,
      content => ${JSON.stringify(commands)},
    }
  }
}
`;

// One node definition for both environments; the bootstrap one adds its stage marker.
const SITE_NODE = `  include lab::paths
  include lab::nrpe
  include motd
  case $facts['role'] {
    'web':     { include role::web }
    'db':      { include role::db }
    'monitor': { include role::monitor }
    undef, '': { }
    default:   { fail("unknown role '\${facts['role']}': web, db or monitor") }
  }`;

export const BOOTSTRAP_SITE = `# muster lab: bootstrap stage (classes that are not bootstrap-aware leave themselves out)
node default {
${SITE_NODE}
  file { $lab::paths::stage_marker:
    ensure  => file,
    content => "lifecycle_stage=\${facts['lifecycle_stage']}\\n",
  }
}
`;

export const PRODUCTION_SITE = `# muster lab: production
node default {
${SITE_NODE}
}
`;

// motd in the blog's style: a header, then one line per registered module. The fragments live
// in motd.d (purged of anything not registered) and are joined in name order whenever the joined
// text differs from the motd: no concat module needed.
const MOTD_INIT = `class motd {
  include lab::paths
  $fragments = $lab::paths::motd_dir
  $motd = $lab::paths::motd
  file { $fragments:
    ensure  => directory,
    recurse => true,
    purge   => true,
    force   => true,
  }
  file { "\${fragments}/00-header":
    ensure  => file,
    content => "\${trusted['certname']} is managed by Puppet (country \${facts['country']}, stage \${facts['lifecycle_stage']})\\ncustomer \${facts['customer']}, environment \${facts['environment']}\\nPuppet modules:\\n",
  }
  exec { 'motd':
    command  => "cat \${shellquote($fragments)}/* > \${shellquote($motd)}.new && mv \${shellquote($motd)}.new \${shellquote($motd)}",
    unless   => "cat \${shellquote($fragments)}/* | cmp -s - \${shellquote($motd)}",
    provider => shell,
    path     => ['/usr/bin', '/bin'],
    require  => File["\${fragments}/00-header"],
  }
}
`;

const MOTD_REGISTER = `# A line in the motd for the class that declares it (the blog's motd::register).
define motd::register(Integer[1, 99] $order = 50) {
  include motd
  $slug = downcase(regsubst($title, '[^A-Za-z0-9]+', '_', 'G'))
  file { "\${lab::paths::motd_dir}/\${order}-\${slug}":
    ensure  => file,
    content => "        - \${title}\\n",
    before  => Exec['motd'],
  }
}
`;

const ROLE_WEB = `class role::web {
  motd::register { 'web server (role::web)': order => 10 }
  if $lab::paths::machine { lab::service { 'webapp': user => 'webapp', port => 8080, description => 'the lab web application' } }
  # webapp asks the registry (search_nodes): not before the node is part of the fleet
  if $facts['lifecycle_stage'] != 'bootstrap' { include webapp }
}
`;

const ROLE_DB = `class role::db {
  motd::register { 'database server (role::db)': order => 10 }
  if $lab::paths::machine { lab::service { 'labdb': user => 'mysql', port => 3306, description => 'the lab database server' } }
  if $facts['lifecycle_stage'] != 'bootstrap' {
    case $facts['mysql_role'] {
      'master': { include mysql::master }
      'slave':  { include mysql::slave }
      default:  { fail("role::db needs the fact mysql_role: master or slave, not '\${facts['mysql_role']}'") }
    }
  }
}
`;

const ROLE_MONITOR = `class role::monitor {
  motd::register { 'monitoring (role::monitor)': order => 10 }
  if $facts['lifecycle_stage'] != 'bootstrap' {
    # full records: what to monitor and where it is
    $nodes = search_nodes({ 'select' => 'role::web or role::db' }, { 'full' => true })
    file { $lab::paths::monitored:
      ensure  => file,
      content => $nodes.map |$n| { "\${n['identity']} \${n['facts']['ipaddress']} \${n['facts']['customer']} \${n['facts']['environment']}\\n" }.join(''),
    }
  }
}
`;

/** The query a web node (and a slave) uses to find its database master. */
export const MASTERDB_QUERY = "customer=${facts['customer']} environment=${facts['environment']} mysql::master";

const WEBAPP = `class webapp {
  # a web node that names no customer and environment (one made from docs/deploy.md's example) has no database to find
  $masterdb = if $facts['customer'] and $facts['environment'] { search_nodes("${MASTERDB_QUERY}") } else { [] }
  if $masterdb.length > 1 { warning("webapp: more than one mysql::master for \${facts['customer']} \${facts['environment']}: \${masterdb.join(', ')}; using the first") }
  $db = if $masterdb.empty { 'none' } else { $masterdb[0] }
  motd::register { 'web application (webapp)': order => 20 }
  file { $lab::paths::webapp_conf:
    ensure  => file,
    content => "# managed by Puppet (webapp); the database master of \${facts['customer']} \${facts['environment']}, found with search_nodes\\ndatabase_host = \${db}\\n",
  }
}
`;

const MYSQL_MASTER = `class mysql::master {
  motd::register { 'MySQL master (mysql::master)': order => 20 }
  file { $lab::paths::my_cnf:
    ensure  => file,
    content => "[mysqld]\\nserver-id = 1\\nlog-bin = mysql-bin\\n",
  }
}
`;

const MYSQL_SLAVE = `class mysql::slave {
  $masterdb = search_nodes("${MASTERDB_QUERY}")
  $master = if $masterdb.empty { 'none' } else { $masterdb[0] }
  motd::register { 'MySQL slave (mysql::slave)': order => 20 }
  file { $lab::paths::my_cnf:
    ensure  => file,
    content => "[mysqld]\\nread-only = 1\\n# replicates from\\nmaster-host = \${master}\\n",
  }
}
`;

/** The lab's own modules (motd, role, mysql, webapp). */
export function labModules(): Record<string, Record<string, string>> {
  return {
    lab: { "manifests/paths.pp": LAB_PATHS, "manifests/service.pp": LAB_SERVICE, "manifests/nrpe.pp": labNrpe(labNrpeConfig()) },
    motd: { "manifests/init.pp": MOTD_INIT, "manifests/register.pp": MOTD_REGISTER },
    role: { "manifests/web.pp": ROLE_WEB, "manifests/db.pp": ROLE_DB, "manifests/monitor.pp": ROLE_MONITOR },
    webapp: { "manifests/init.pp": WEBAPP },
    mysql: { "manifests/master.pp": MYSQL_MASTER, "manifests/slave.pp": MYSQL_SLAVE },
  };
}

/** puppet/modules/ of this checkout (where the muster module ships), from src/ or dist/src/. */
export function shippedModulesDir(): string {
  for (const up of ["../../../puppet/modules", "../../puppet/modules"]) {
    const d = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(join(d, "muster"))) return d;
  }
  throw new Error("puppet/modules/muster is missing from this muster installation (it ships search_nodes)");
}

/** A shipped module's files, relative to the module root. */
export function shippedModule(name: string): Record<string, string> {
  const root = join(shippedModulesDir(), name);
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of readdirSync(d)) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else out[relative(root, p)] = readFileSync(p, "utf8");
    }
  };
  walk(root);
  return out;
}

export function labEnvironments(): Record<string, EnvironmentFiles> {
  const modules = { ...labModules(), muster: shippedModule("muster") };
  return { bootstrap: { manifest: BOOTSTRAP_SITE, modules }, production: { manifest: PRODUCTION_SITE, modules } };
}
