import { test } from "node:test";
import assert from "node:assert/strict";
import { directoryRefusal, fileModeProblem, packageChangeRefusal, resourceRefusal, RULED_TYPES, type PackageState, type ResourceRuleSettings } from "../../src/puppet/resource-rule.js";

// The resource rule, pure: what a node's `puppet resource` may be asked, type by type. Every
// property that runs a command or reaches outside the allowed directories is refused by name,
// because only what is listed passes (test/privileged/hostile.test.ts sends the same through the
// real helper as another user).

const s: ResourceRuleSettings = { allowedTypes: new Set(["file", "package", "service"]), filePaths: ["/srv/files"], fileOwners: ["www-data"], fileGroups: ["www-data", "0"] };
const refused = (type: string, name: string, props: [string, string][], re: RegExp, reason?: string) => {
  const r = resourceRefusal(s, type, name, props);
  assert.ok(r, `allowed: ${type} ${name} ${JSON.stringify(props)}`);
  assert.match(r.message, re, `${type} ${name} ${JSON.stringify(props)}`);
  if (reason) assert.equal(r.reason, reason);
};
const allowed = (type: string, name: string, props: [string, string][]) => assert.equal(resourceRefusal(s, type, name, props), undefined, `${type} ${name} ${JSON.stringify(props)}`);

test("three types have a rule; any other is refused even when allowed_types lists it", () => {
  assert.deepEqual([...RULED_TYPES], ["file", "package", "service"]);
  const wide = { ...s, allowedTypes: new Set(["exec", "user", "cron", "file"]) };
  for (const t of ["exec", "user", "cron"]) assert.match(resourceRefusal(wide, t, "x", [])!.message, new RegExp(`'${t}' has no rule in muster`));
  assert.match(resourceRefusal(s, "mount", "/mnt", [])!.message, /'mount' is not allowed on this node \(allowed: file, package, service\)/);
});

test("service: ensure and enable, nothing that names a command or a provider", () => {
  allowed("service", "nginx", [["ensure", "running"], ["enable", "true"]]);
  allowed("service", "getty@tty1.service", [["ensure", "stopped"]]);
  allowed("service", "nginx", []);
  for (const p of ["provider", "start", "stop", "status", "restart", "binary", "path", "control", "hasstatus", "hasrestart", "pattern", "flags", "manifest"]) {
    refused("service", "nginx", [[p, "/bin/sh -c 'id > /tmp/pwned'"]], new RegExp(`property ${p} is not allowed; service takes only ensure, enable`), "property_denied");
  }
  refused("service", "nginx", [["ensure", "/bin/sh"]], /ensure="\/bin\/sh" is not allowed; ensure must be one of running, stopped, true, false/, "value_denied");
  refused("service", "nginx", [["enable", "manual"]], /enable="manual"/);
  for (const name of ["/etc/systemd/system/x.service", "../x", "-x", "a b", "nginx;id", "nġinx"]) refused("service", name, [["ensure", "running"]], /named by its unit name/, "name_denied");
});

test("package: ensure with versions; no provider, source, options or responsefile; names without paths", () => {
  for (const v of ["present", "installed", "absent", "purged", "latest", "1.2.3-1", "1:2.0~rc1+dfsg-3"]) allowed("package", "htop", [["ensure", v]]);
  for (const p of ["provider", "source", "install_options", "uninstall_options", "responsefile", "adminfile", "command", "configfiles", "allow_virtual", "reinstall_on_refresh", "mark"]) {
    refused("package", "htop", [[p, "x"]], new RegExp(`property ${p} is not allowed; package takes only ensure`), "property_denied");
  }
  for (const v of ["held", "1.0 2.0", "--reinstall", "*", "", "1.0;id"]) refused("package", "htop", [["ensure", v]], /ensure=.* is not allowed/, "value_denied");
  for (const name of ["./evil.deb", "/tmp/evil.deb", "evil.deb", "evil.udeb", "evil.dsc", "htop=1.0", "htop/bookworm", "HTOP", "h", "-o", "htop evil"]) refused("package", name, [["ensure", "present"]], /named by its Debian package name/, "name_denied");
});

test("file: ensure file/directory/absent, content, a safe mode, owner and group from the lists; nothing else", () => {
  allowed("file", "/srv/files/a", [["ensure", "file"], ["content", "hi"], ["mode", "0644"], ["owner", "www-data"], ["group", "www-data"]]);
  allowed("file", "/srv/files/d", [["ensure", "directory"], ["mode", "0755"]]);
  allowed("file", "/srv/files/a", [["ensure", "absent"]]);
  for (const p of ["source", "target", "path", "recurse", "force", "links", "backup", "validate_cmd", "checksum", "purge", "replace", "ctime", "selinux_ignore_defaults", "seltype"]) {
    refused("file", "/srv/files/a", [[p, "x"]], new RegExp(`property ${p} is not allowed; file takes only ensure, content, mode, owner, group`), "property_denied");
  }
  for (const v of ["link", "present", "/etc/shadow", "../../etc"]) refused("file", "/srv/files/a", [["ensure", v]], /ensure=.* is not allowed; ensure must be one of file, directory, absent/, "value_denied");
  refused("file", "/srv/files/a", [["owner", "root"]], /owner="root" is not allowed; owner must be one of plugins\.resource\.file_owners \(www-data\)/);
  refused("file", "/srv/files/a", [["group", "muster"]], /group="muster" is not allowed/);
});

test("file modes: octal, no setuid, setgid or sticky bit, nothing others can write", () => {
  for (const m of ["0644", "644", "0755", "0600", "0770", "0000"]) assert.equal(fileModeProblem(m), undefined, m);
  for (const m of ["4755", "04755", "2755", "1755", "6777"]) assert.match(fileModeProblem(m)!, /without setuid, setgid or sticky/, m);
  for (const m of ["0777", "0666", "0646", "0602"]) assert.match(fileModeProblem(m)!, /others cannot write/, m);
  for (const m of ["u+s", "a=rwx", "0o755", "08", "99999", "0x1ff", " 0644"]) assert.match(fileModeProblem(m)!, /an octal mode/, m);
});

test("file titles: plain absolute paths strictly under file_paths; without file_paths, no file at all", () => {
  for (const name of ["/etc/sudoers", "/srv/files", "/srv/filesx/a", "/srv/files/../x", "/srv/files/./a", "/srv//files/a", "srv/files/a"]) refused("file", name, [["ensure", "file"]], /outside the directories|not a plain absolute path/, "path_denied");
  allowed("file", "/srv/files/sub/a", [["ensure", "file"]]);
  allowed("file", "/srv/files/a/", [["ensure", "directory"]]);
  // a look-alike slash is a character of a file name, not a way out
  allowed("file", "/srv/files/..\u2215..\u2215etc", [["ensure", "file"]]);
  const { filePaths: _f, ...unfenced } = s;
  assert.match(resourceRefusal(unfenced, "file", "/srv/files/a", [["ensure", "file"]])!.message, /file_paths is not set, so no file may be managed/);
  assert.match(resourceRefusal(unfenced, "file", "/srv/files/a", [])!.message, /file_paths is not set/, "reads too");
});

test("file_paths where root runs code (or holding such a place) refuses every file there, reads included; a data directory beside it is fine", () => {
  const wide = { ...s, filePaths: ["/etc/facter/facts.d", "/etc", "/var/lib", "/srv/files"] };
  assert.match(resourceRefusal(wide, "file", "/etc/facter/facts.d/x", [["content", "id"], ["mode", "0755"]])!.message, /file_paths directory \/etc\/facter\/facts\.d is under \/etc\/facter, where root runs or loads code from \(Facter's external facts/);
  assert.match(resourceRefusal(wide, "file", "/etc/myapp/x", [])!.message, /file_paths directory \/etc holds \/etc\//);
  assert.match(resourceRefusal(wide, "file", "/var/lib/myapp/x", [["ensure", "file"]])!.message, /\/var\/lib holds \/var\/lib\/puppet/);
  assert.equal(resourceRefusal(wide, "file", "/var/lib/myapp/x", [["ensure", "file"]])!.reason, "path_denied");
  allowed("file", "/srv/files/facts.rb", [["content", "Facter.add(:x) { setcode { 1 } }"]]);
});

test("file content Puppet would read as a checksum and fetch from its filebucket is refused, and never echoed; other braces are text", () => {
  for (const c of ["{sha256}0123abc", "{md5}d41d8cd98f00b204e9800998ecf8427e", "{sha1}x", "{mtime}2024", "{a}b", "{SHA256}x", "{sha256lite}x"]) {
    const r = resourceRefusal(s, "file", "/srv/files/a", [["content", c]]);
    assert.match(r?.message ?? "", /content \(as given\) is not allowed; content must be text that does not start with \{word\}/, c);
    assert.equal(r!.message.includes(c), false, "the content is not in the message");
  }
  for (const c of ["{}", "{ \"a\": 1 }", "{not a sum", "text {sha256}abc", "{-}x"]) allowed("file", "/srv/files/a", [["content", c]]);
});

test("a directory: no owner but root, no group write, whether ensure says directory or the path is one already", () => {
  refused("file", "/srv/files/d", [["ensure", "directory"], ["mode", "0770"]], /mode="0770" is not allowed on a directory/, "value_denied");
  refused("file", "/srv/files/d", [["ensure", "directory"], ["owner", "www-data"]], /owner="www-data" is not allowed on a directory/, "value_denied");
  allowed("file", "/srv/files/d", [["ensure", "directory"], ["mode", "0750"], ["group", "www-data"]]);
  // a file may still be its group's to write, and its owner's
  allowed("file", "/srv/files/f", [["ensure", "file"], ["mode", "0660"], ["owner", "www-data"]]);
  // without ensure, what the path is now decides: the helper looks (as root) in its turn
  const dir = { mode: 0o40755 };
  assert.match(directoryRefusal("/srv/files/d", [["mode", "0775"]], dir)!.message, /mode="0775" is not allowed on a directory/);
  assert.match(directoryRefusal("/srv/files/d", [["owner", "www-data"]], dir)!.message, /owner="www-data" is not allowed on a directory/);
  assert.equal(directoryRefusal("/srv/files/f", [["mode", "0775"]]), undefined);
  assert.equal(directoryRefusal("/srv/files/d", [["owner", "root"], ["mode", "0755"]], dir), undefined);
  assert.equal(directoryRefusal("/srv/files/d", [["owner", "0"]], dir), undefined);
  // a group on a directory its group may write already hands the write to that group
  assert.match(directoryRefusal("/srv/files/d", [["group", "www-data"]], { mode: 0o40775 })!.message, /group="www-data" is not allowed on this directory: its mode \(0775\) lets its group write/);
  assert.equal(directoryRefusal("/srv/files/d", [["group", "www-data"], ["mode", "0750"]], { mode: 0o40775 }), undefined);
  assert.equal(directoryRefusal("/srv/files/d", [["group", "www-data"]], dir), undefined);
  // ensure=file on a directory: Puppet refuses to replace it (no force), so it stays as it is
  assert.equal(directoryRefusal("/srv/files/d", [["ensure", "file"], ["mode", "0664"]], dir), undefined);
});

test("package changes against dpkg's state: pins only upward on an installed package, nothing on a held one, no removal of Essential or Protected", () => {
  const st = (o: Partial<PackageState>): PackageState => ({ installed: ["2.0"], held: false, essential: false, protected: false, ...o });
  const no = (ensure: string | undefined, state: PackageState, re: RegExp) => assert.match(packageChangeRefusal("pkg", ensure, state)?.message ?? "allowed", re, `${ensure} ${JSON.stringify(state)}`);
  const yes = (ensure: string | undefined, state: PackageState) => assert.equal(packageChangeRefusal("pkg", ensure, state), undefined, `${ensure} ${JSON.stringify(state)}`);
  for (const e of ["1.0", "2.0", "3.0", "present", "latest", "absent", "purged"]) no(e, st({ held: true, pinNotLower: true }), /pkg is held \(dpkg selection hold/);
  yes(undefined, st({ held: true })); // showing it
  no("1.0", st({ pinNotLower: false }), /pkg 2\.0 is installed, and a version pin never goes down/);
  no("1.0", st({}), /never goes down/); // not compared: refused
  yes("3.0", st({ pinNotLower: true }));
  yes("2.0", st({ pinNotLower: true })); // where it is: nothing to do
  no("1.0", st({ installed: [] }), /pkg is not installed, and a version pin only moves an installed package up/);
  yes("present", st({ installed: [] }));
  yes("latest", st({ installed: [] }));
  for (const e of ["absent", "purged"]) {
    no(e, st({ essential: true }), /pkg is Essential/);
    no(e, st({ protected: true }), /pkg is Protected/);
    yes(e, st({}));
  }
  yes("latest", st({ essential: true }));
  // every architecture installed counts: one above the pin refuses it
  no("2.0", st({ installed: ["2.0", "2.1"], pinNotLower: false }), /pkg 2\.0, 2\.1 is installed/);
});
