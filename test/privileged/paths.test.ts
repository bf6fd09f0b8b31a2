import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathRefusal } from "../../src/privileged/paths.js";
import { DAEMON_UID, GROUP, rootTempDir } from "./rig.js";

// The helper's walk (src/privileged/paths.ts) over real directories: which trees let only root
// change where a `file` resource's path leads, and which would let someone else redirect the write.
// Root makes each tree (chown needs root; the file's walk runs as root in the helper too), under
// /var/lib, so that nothing above them is writable by another user.

const root = process.getuid?.() === 0;
const skip = !root && "needs root: the walk accepts only root's directories";
const tmp = root ? rootTempDir("paths") : undefined;
let n = 0;
/** A fresh directory of root's, 0755, for one case. */
const fresh = () => {
  const d = join(tmp!.path, `case-${n++}`);
  mkdirSync(d, { mode: 0o755 });
  chmodSync(d, 0o755);
  return d;
};

after(() => tmp?.remove());

test("accepted: root's directories all the way down, a file to make or one that is there, a directory below", { skip }, () => {
  const base = fresh();
  const allowed = join(base, "files");
  mkdirSync(join(allowed, "sub"), { recursive: true, mode: 0o755 });
  assert.equal(pathRefusal(join(allowed, "new"), allowed), undefined);
  writeFileSync(join(allowed, "there"), "x");
  assert.equal(pathRefusal(join(allowed, "there"), allowed), undefined);
  assert.equal(pathRefusal(join(allowed, "sub", "new"), allowed), undefined);
  assert.equal(pathRefusal(join(allowed, "newdir"), allowed), undefined, "a directory to make (ensure=directory) in one that is there");
  // others may read and enter: only write matters
  chmodSync(allowed, 0o711);
  assert.equal(pathRefusal(join(allowed, "new"), allowed), undefined);
});

test("a missing file_paths directory under a sticky world-writable directory (as under /tmp or /dev/shm): refused, and so is one that is there", { skip }, () => {
  const sticky = join(fresh(), "shm");
  mkdirSync(sticky);
  chmodSync(sticky, 0o1777);
  const allowed = join(sticky, "x-missing");
  const why = pathRefusal(join(allowed, "f"), allowed);
  assert.equal(why, `${sticky} is writable by others (mode 1777), so another user could redirect a write below it (every directory above a plugins.resource.file_paths directory must be root's alone, with no write for its group or others, sticky or not)`);
  // root's own directory there: root's cleaners free its name, and then it is anyone's to take
  mkdirSync(allowed, { mode: 0o755 });
  assert.match(pathRefusal(join(allowed, "f"), allowed) ?? "", /shm is writable by others \(mode 1777\)/);
});

test("a missing file_paths directory under root's own: refused, saying to make it", { skip }, () => {
  const base = fresh();
  const allowed = join(base, "files");
  assert.equal(pathRefusal(join(allowed, "f"), allowed), `file_paths directory ${allowed} does not exist: create it root-owned 0755, in directories root owns and nobody else may write`);
  // a directory above it missing too: the same, naming the first one missing
  const deeper = join(base, "a", "b");
  assert.equal(pathRefusal(join(deeper, "f"), deeper), `file_paths directory ${deeper} does not exist (${join(base, "a")} is missing): create it root-owned 0755, in directories root owns and nobody else may write`);
});

test("a missing directory below the file_paths directory: refused (Puppet would not make it), saying to make it first", { skip }, () => {
  const allowed = join(fresh(), "files");
  mkdirSync(allowed, { mode: 0o755 });
  const sub = join(allowed, "sub");
  assert.equal(pathRefusal(join(sub, "deeper", "f"), allowed), `${sub} does not exist: Puppet makes only the file, not the directories above it; make ${sub} first (a file resource with ensure=directory)`);
});

test("a directory above it writable by others, with no sticky bit: refused, naming it and its mode", { skip }, () => {
  const open = fresh();
  chmodSync(open, 0o777);
  const allowed = join(open, "files");
  mkdirSync(allowed, { mode: 0o755 });
  assert.match(pathRefusal(join(allowed, "f"), allowed) ?? "", new RegExp(`^${open} is writable by others \\(mode 0777\\), so another user could redirect a write below it \\(every directory above`));
});

test("group-writable: above the file_paths directory, the directory itself, or below it, refused whatever the group", { skip }, () => {
  const base = fresh();
  const allowed = join(base, "files");
  const sub = join(allowed, "sub");
  mkdirSync(sub, { recursive: true, mode: 0o755 });
  for (const [d, hint] of [
    [base, /every directory above/],
    [allowed, /each plugins\.resource\.file_paths directory, and everything in it, must be root's alone/],
    [sub, /each plugins\.resource\.file_paths directory/],
  ] as const) {
    chownSync(d, 0, GROUP);
    chmodSync(d, 0o775);
    const why = pathRefusal(join(sub, "f"), allowed) ?? "";
    assert.ok(why.startsWith(`${d} is writable by its group (mode 0775)`), why);
    assert.match(why, hint);
    chownSync(d, 0, 0);
    chmodSync(d, 0o755);
  }
  // root's group is a group too
  chmodSync(allowed, 0o770);
  assert.match(pathRefusal(join(allowed, "f"), allowed) ?? "", /files is writable by its group \(mode 0770\)/);
});

test("owned by another uid, above the file_paths directory or in it: refused, even with no write bit (its owner may chmod)", { skip }, () => {
  const base = fresh();
  const allowed = join(base, "files");
  const sub = join(allowed, "sub");
  mkdirSync(sub, { recursive: true, mode: 0o755 });
  for (const d of [base, allowed, sub]) {
    chownSync(d, DAEMON_UID, GROUP);
    chmodSync(d, 0o555);
    const why = pathRefusal(join(sub, "f"), allowed) ?? "";
    assert.ok(why.startsWith(`${d} belongs to uid ${DAEMON_UID}, not root, so another user could redirect a write below it`), why);
    chownSync(d, 0, 0);
    chmodSync(d, 0o755);
  }
});

test("a symbolic link on the way, above, as, or below the file_paths directory, even to root's own directory; a link as the file; a file as a directory", { skip }, () => {
  const base = fresh();
  const real = join(base, "real");
  mkdirSync(join(real, "files", "sub"), { recursive: true, mode: 0o755 });
  // the whole tree through a link above it
  const via = join(base, "via");
  symlinkSync(real, via);
  assert.equal(pathRefusal(join(via, "files", "f"), join(via, "files")), `${via} is a symbolic link, so another user could redirect a write below it (every directory above a plugins.resource.file_paths directory must be root's alone, with no write for its group or others, sticky or not)`);
  // the file_paths directory itself a link
  const linked = join(base, "linked");
  symlinkSync(join(real, "files"), linked);
  assert.match(pathRefusal(join(linked, "f"), linked) ?? "", new RegExp(`^${linked} is a symbolic link, .*each plugins\\.resource\\.file_paths directory`));
  // a link below it
  const allowed = join(real, "files");
  symlinkSync(join(allowed, "sub"), join(allowed, "hop"));
  assert.match(pathRefusal(join(allowed, "hop", "f"), allowed) ?? "", /files\/hop is a symbolic link/);
  // the file itself a link: Puppet would write where it points
  symlinkSync("/etc/passwd", join(allowed, "pw"));
  assert.match(pathRefusal(join(allowed, "pw"), allowed) ?? "", /files\/pw is a symbolic link: a file resource replaces or changes files, never what a link points at/);
  // a file where a directory should be
  writeFileSync(join(allowed, "plain"), "x");
  assert.match(pathRefusal(join(allowed, "plain", "f"), allowed) ?? "", /files\/plain is not a directory/);
});
