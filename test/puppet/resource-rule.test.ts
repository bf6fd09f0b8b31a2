import { test } from "node:test";
import assert from "node:assert/strict";
import { fileModeProblem, resourceRefusal, RULED_TYPES, type ResourceRuleSettings } from "../../src/puppet/resource-rule.js";

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
