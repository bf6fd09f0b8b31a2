import { lstatSync, type Stats } from "node:fs";
import { dirname } from "node:path";

// Where a `file` resource may be written by root (docs/decisions/privileged-helper.md, "No race
// can move a write"). Puppet writes by path, so the helper does not check where a path leads now
// (a swap could change that a moment later); it checks who could change where it leads. Every
// directory from / down to the file's own exists, is a real directory (no symbolic link), is owned
// by root and is writable by root alone, the allowed directory (plugins.resource.file_paths) and
// every directory above it included. Then no one but root can create, rename, remove or re-point
// anything the path passes through, so no other user can win a race between this walk and
// Puppet's write: the race needs a write permission the walk has just shown nobody else holds,
// and only root could grant it. Group write is refused whatever the group: with POSIX ACLs the
// group bits are the mask, so no named entry can write either.
//
// A missing directory is refused, wherever it is: whoever may write its parent could make it (as a
// link out) after the walk, and Puppet makes only the file itself, never the directories above it.
// A sticky directory others may write (/tmp, /var/tmp, /dev/shm) is refused above the allowed
// directory too, although nobody but root may rename or remove a root-owned entry there: a name
// there is anyone's to take while it is free, and root frees them (systemd-tmpfiles ages /tmp and
// /var/tmp out), so the allowed directory could be gone and someone else's link between the walk
// and the write.

const WITHIN = "each plugins.resource.file_paths directory, and everything in it, must be root's alone";
const ABOVE = "every directory above a plugins.resource.file_paths directory must be root's alone, with no write for its group or others, sticky or not";

/** Why writing `path` (strictly under `allowedDir`) could be redirected by a user other than root, or undefined. */
export function pathRefusal(path: string, allowedDir: string): string | undefined {
  const chain: string[] = [];
  for (let d = dirname(path); ; d = dirname(d)) {
    chain.unshift(d);
    if (d === dirname(d)) break;
  }
  for (const d of chain) {
    const within = d === allowedDir || d.startsWith(`${allowedDir}/`);
    const st = lstatOrUndefined(d);
    if (!st) {
      if (!within || d === allowedDir) return `file_paths directory ${allowedDir} does not exist${d === allowedDir ? "" : ` (${d} is missing)`}: create it root-owned 0755, in directories root owns and nobody else may write`;
      return `${d} does not exist: Puppet makes only the file, not the directories above it; make ${d} first (a file resource with ensure=directory)`;
    }
    const problem = directoryProblem(st);
    if (problem) return `${d} ${problem}, so another user could redirect a write below it (${within ? WITHIN : ABOVE})`;
  }
  const target = lstatOrUndefined(path);
  if (target?.isSymbolicLink()) return `${path} is a symbolic link: a file resource replaces or changes files, never what a link points at`;
  return undefined;
}

function directoryProblem(st: Stats): string | undefined {
  if (st.isSymbolicLink()) return "is a symbolic link";
  if (!st.isDirectory()) return "is not a directory";
  if (st.uid !== 0) return `belongs to uid ${st.uid}, not root`;
  if (st.mode & 0o022) return `is writable by ${st.mode & 0o002 ? "others" : "its group"} (mode ${(st.mode & 0o7777).toString(8).padStart(4, "0")})`;
  return undefined;
}

function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT" || (e as NodeJS.ErrnoException).code === "ENOTDIR") return undefined;
    throw e;
  }
}
