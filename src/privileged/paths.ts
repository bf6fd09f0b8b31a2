import { lstatSync, type Stats } from "node:fs";
import { dirname } from "node:path";

// Where a `file` resource may be written by root (docs/decisions/privileged-helper.md, "No race
// can move a write"). Puppet writes by path, so the helper does not check where a path leads now
// (a swap could change that a moment later); it checks who could change where it leads. Every
// directory from / down to the file's own is a real directory (no symbolic link), owned by root and
// writable by root alone, the allowed directory (plugins.resource.file_paths) included; above it,
// a directory others may write is accepted only with the sticky bit (as /tmp has it), where nobody
// but root may rename or remove the root-owned entry the path goes through. Then no one but root
// can create, rename, remove or re-point anything the path passes through, so no other user can
// win a race between this walk and Puppet's write: the race needs a write permission the walk has
// just shown nobody else holds, and only root could grant it. Group write is refused whatever the
// group: with POSIX ACLs the group bits are the mask, so no named entry can write either.

/** Why writing `path` (strictly under `allowedDir`) could be redirected by a user other than root, or undefined. */
export function pathRefusal(path: string, allowedDir: string): string | undefined {
  const chain: string[] = [];
  for (let d = dirname(path); ; d = dirname(d)) {
    chain.unshift(d);
    if (d === dirname(d)) break;
  }
  for (const d of chain) {
    const st = lstatOrUndefined(d);
    // Missing from here down: its parent is root's alone (checked), so nobody else can make it.
    if (!st) return undefined;
    const within = d === allowedDir || d.startsWith(`${allowedDir}/`);
    const problem = directoryProblem(st, within);
    if (problem) return `${d} ${problem}, so another user could redirect a write below it${within ? " (each plugins.resource.file_paths directory, and everything in it, must be root's alone)" : ""}`;
  }
  const target = lstatOrUndefined(path);
  if (target?.isSymbolicLink()) return `${path} is a symbolic link: a file resource replaces or changes files, never what a link points at`;
  return undefined;
}

function directoryProblem(st: Stats, withinAllowed: boolean): string | undefined {
  if (st.isSymbolicLink()) return "is a symbolic link";
  if (!st.isDirectory()) return "is not a directory";
  if (st.uid !== 0) return `belongs to uid ${st.uid}, not root`;
  const sticky = (st.mode & 0o1000) !== 0;
  if (st.mode & 0o022 && (withinAllowed || !sticky)) return `is writable by ${st.mode & 0o002 ? "others" : "its group"} (mode ${(st.mode & 0o7777).toString(8).padStart(4, "0")})`;
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
