import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { facterConfPaths, PUPPET_CODE_SETTINGS, settingPaths } from "../../src/puppet/code-dirs.js";
import { ROOT_CODE, rootCodeHit } from "../../src/puppet/root-code.js";
import { repoRoot } from "../support/collective.js";

// Where root runs or loads code from (src/puppet/root-code.ts), pure: which file_paths directories
// meet the list (are, are under, or hold one), docs/security.md's table held equal to it, and the
// paths read from Puppet's settings and facter.conf. hostile.test.ts sends writes there through the
// real helper, as real root in a Debian tree, with Puppet's own factpath moved by puppet.conf.

test("docs/security.md lists exactly the code's list: each group's paths and why, in order", () => {
  const doc = readFileSync(`${repoRoot}/docs/security.md`, "utf8");
  const section = doc.slice(doc.indexOf("### Directories root runs code from"));
  const rows = section
    .split("\n")
    .filter((l) => /^\| `\//.test(l))
    .map((l) => {
      const [paths, why] = l.slice(2, -2).split(" | ");
      return { paths: [...paths!.matchAll(/`([^`]+)`/g)].map((m) => m[1]), why };
    });
  assert.deepEqual(rows, ROOT_CODE.map((g) => ({ paths: [...g.paths], why: g.why })));
});

test("a file_paths directory that is, is under, or holds a place root runs code from is a hit; data directories are not", () => {
  assert.deepEqual(rootCodeHit("/etc/facter/facts.d"), { path: "/etc/facter", why: ROOT_CODE.find((g) => g.paths.includes("/etc/facter"))!.why, relation: "is under" });
  assert.equal(rootCodeHit("/etc/cron.d")?.relation, "is");
  assert.equal(rootCodeHit("/etc/cron.d/")?.relation, "is", "a trailing slash is the same directory");
  for (const [dir, path] of [
    ["/etc", "/etc/ld.so.conf"],
    ["/", "/usr"],
    ["/var", "/var/lib/puppet"],
    ["/var/lib", "/var/lib/puppet"],
    ["/var/cache", "/var/cache/puppet"],
    ["/opt", "/opt/puppetlabs"],
    ["/var/spool", "/var/spool/cron"],
  ]) {
    assert.deepEqual([rootCodeHit(dir!)?.relation, rootCodeHit(dir!)?.path], ["holds", path], dir);
  }
  for (const dir of ["/usr/local/lib/site_ruby", "/var/cache/puppet/facts", "/run/muster-test", "/root/files", "/proc/sys/kernel", "/etc/systemd/system", "/etc/apt/apt.conf.d", "/var/lib/dpkg/info", "/etc/sudoers.d/inner", "/etc/profile.d/inner", "/etc/udev/rules.d", "/etc/ssh/sshd_config.d", "/etc/muster/tls"]) {
    assert.equal(rootCodeHit(dir)?.relation, "is under", dir);
  }
  // a name that only starts like a listed one is not in it
  for (const dir of ["/srv/files", "/var/lib/myapp", "/etc/myapp", "/var/www/site", "/etc/sshd-data", "/var/lib/muster-test", "/usrdata", "/opt/myapp", "/etc/puppet-data"]) {
    assert.equal(rootCodeHit(dir), undefined, dir);
  }
});

test("what Puppet reports at run time joins the list: a factpath moved to /srv is a hit there, and above it", () => {
  const extra = settingPaths({ factpath: "/srv/rootfacts:/var/cache/puppet/facts", basemodulepath: "/srv/modules:/usr/share/puppet/modules", certname: "node1", confdir: "relative/ignored" });
  assert.deepEqual(extra, [
    { path: "/srv/rootfacts", why: "Puppet's factpath" },
    { path: "/var/cache/puppet/facts", why: "Puppet's factpath" },
    { path: "/srv/modules", why: "Puppet's basemodulepath" },
    { path: "/usr/share/puppet/modules", why: "Puppet's basemodulepath" },
  ]);
  assert.deepEqual(rootCodeHit("/srv/rootfacts", extra), { path: "/srv/rootfacts", why: "Puppet's factpath", relation: "is" });
  assert.equal(rootCodeHit("/srv", extra)?.relation, "holds");
  assert.equal(rootCodeHit("/srv/files", extra), undefined);
  assert.ok(PUPPET_CODE_SETTINGS.includes("factpath") && PUPPET_CODE_SETTINGS.includes("pluginfactdest") && PUPPET_CODE_SETTINGS.includes("libdir"));
});

test("facter.conf: every absolute path it names, quoted or bare, in lists or not; comments are not read", () => {
  const conf = `
# external-dir : [ "/commented/out" ]
global : {
    external-dir     : [ "/srv/facts", '/srv/more-facts/' ]
    custom-dir       : /srv/custom
    no-external-facts : false // not /a/path
}
cli : { log-level : "warn" }
`;
  assert.deepEqual(facterConfPaths(conf), ["/srv/facts", "/srv/more-facts", "/srv/custom"]);
});
