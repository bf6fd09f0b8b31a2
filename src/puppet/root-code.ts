import { posix } from "node:path";

// Where root loads or runs code from (docs/decisions/privileged-helper.md, "Directories root runs
// code from"): a `file` the resource rule lets the node daemon write as root must never land in
// one of these, nor may a plugins.resource.file_paths directory hold one of them (file_paths: [/etc]
// holds /etc/cron.d). A fact in /etc/facter/facts.d, a Ruby fact in Puppet's factpath, a cron job,
// a sudoers line, a unit, an apt hook: each is a command root runs later, whatever mode the file
// has (a 0644 Ruby fact is loaded, not executed). Pure: the list, and the test of a directory
// against it; the helper adds the directories Puppet's own settings name at run time
// (src/puppet/code-dirs.ts). docs/security.md lists the same entries (test/puppet/root-code.test.ts
// holds them in step).

export interface RootCodeGroup {
  /** Absolute paths, directories or files. */
  paths: readonly string[];
  /** What root runs or loads from them. */
  why: string;
}

export const ROOT_CODE: readonly RootCodeGroup[] = [
  { paths: ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"], why: "programs and libraries, Ruby, Perl and Python modules (/usr/local/lib/site_ruby comes first in Ruby's path)" },
  { paths: ["/boot"], why: "the kernel, the initramfs and the boot loader" },
  { paths: ["/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload", "/etc/ld.so.cache"], why: "where the dynamic linker finds libraries, and libraries it loads into every program" },
  {
    paths: ["/etc/puppet", "/etc/puppetlabs", "/var/lib/puppet", "/var/cache/puppet", "/opt/puppetlabs"],
    why: "Puppet's and Facter's configuration, code, plugins, factpath and certificates (Debian's and Puppet's own packages); the settings Puppet reports at run time are added",
  },
  { paths: ["/etc/facter"], why: "Facter's external facts (facts.d, run or read as root) and facter.conf, which names more" },
  { paths: ["/var/lib/gems"], why: "Ruby gems Puppet and Facter load" },
  { paths: ["/etc/crontab", "/etc/cron.d", "/etc/cron.hourly", "/etc/cron.daily", "/etc/cron.weekly", "/etc/cron.monthly", "/etc/cron.yearly", "/etc/anacrontab", "/var/spool/cron"], why: "cron and at jobs" },
  { paths: ["/etc/systemd", "/run"], why: "systemd units, timers, generators and drop-ins (/run: runtime units, udev rules, sysctl, tmpfiles, modules, binfmt, sudo's timestamps, muster's socket)" },
  { paths: ["/etc/init.d", "/etc/rc0.d", "/etc/rc1.d", "/etc/rc2.d", "/etc/rc3.d", "/etc/rc4.d", "/etc/rc5.d", "/etc/rc6.d", "/etc/rcS.d", "/etc/rc.local", "/etc/default", "/etc/inittab"], why: "init scripts and the defaults files they source" },
  { paths: ["/etc/sudoers", "/etc/sudoers.d", "/etc/sudo.conf"], why: "who may run what as root" },
  { paths: ["/etc/pam.d", "/etc/pam.conf", "/etc/security", "/etc/environment", "/etc/environment.d"], why: "PAM modules and their settings, the environment of every login (LD_PRELOAD)" },
  { paths: ["/etc/polkit-1", "/var/lib/polkit-1", "/etc/dbus-1"], why: "polkit rules (JavaScript run by polkitd) and the system bus' policy" },
  { paths: ["/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/nsswitch.conf"], why: "the account database, and which libraries resolve accounts" },
  { paths: ["/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/bash_completion.d", "/etc/zsh", "/root"], why: "shell start-up files root's shells read, and root's home" },
  { paths: ["/etc/modprobe.d", "/etc/modules", "/etc/modules-load.d", "/etc/sysctl.conf", "/etc/sysctl.d", "/etc/tmpfiles.d", "/etc/binfmt.d", "/etc/udev"], why: "kernel modules and their install commands, kernel settings (core_pattern runs a program), tmpfiles, interpreters, udev rules (RUN=)" },
  { paths: ["/etc/kernel", "/etc/initramfs-tools", "/etc/grub.d"], why: "kernel, initramfs and boot loader hooks" },
  { paths: ["/proc", "/sys", "/dev"], why: "the kernel's own settings and devices (/proc/sys/kernel/core_pattern, /sys/kernel/uevent_helper)" },
  { paths: ["/etc/apt", "/var/lib/apt", "/var/cache/apt", "/etc/dpkg", "/var/lib/dpkg", "/var/cache/debconf", "/etc/needrestart"], why: "apt's and dpkg's configuration and hooks, package indexes and archives, maintainer scripts, debconf's answers" },
  { paths: ["/etc/alternatives"], why: "which program a command name runs" },
  { paths: ["/etc/logrotate.conf", "/etc/logrotate.d", "/etc/rsyslog.conf", "/etc/rsyslog.d"], why: "logrotate's scripts, rsyslog's programs (omprog)" },
  { paths: ["/etc/ssh"], why: "sshd's configuration (AuthorizedKeysCommand, ForceCommand) and host keys" },
  { paths: ["/etc/update-motd.d"], why: "scripts run at every login" },
  { paths: ["/etc/network", "/etc/NetworkManager", "/etc/dhcp", "/etc/networkd-dispatcher", "/etc/ppp", "/etc/wpa_supplicant", "/etc/acpi", "/etc/xinetd.d"], why: "network, DHCP, ACPI and inetd hooks" },
  { paths: ["/etc/cloud", "/var/lib/cloud"], why: "cloud-init's configuration and its per-boot and per-instance scripts" },
  { paths: ["/etc/ssl", "/etc/ca-certificates"], why: "the certificate authorities apt and other tools trust" },
  { paths: ["/etc/apparmor", "/etc/apparmor.d", "/etc/selinux"], why: "the mandatory access control policy" },
  { paths: ["/etc/muster", "/var/lib/muster"], why: "muster's own configuration (this helper's rules) and the node's keys" },
];

/** Every path of the list, with why. */
export const ROOT_CODE_PATHS: readonly { path: string; why: string }[] = ROOT_CODE.flatMap((g) => g.paths.map((path) => ({ path, why: g.why })));

export interface RootCodeHit {
  /** The listed path (or one Puppet names) that `dir` meets. */
  path: string;
  why: string;
  /** `dir` is that path, is under it, or holds it. */
  relation: "is" | "is under" | "holds";
}

const under = (p: string, d: string) => d === "/" || p.startsWith(`${d}/`);

/**
 * Whether `dir` (a file_paths directory, or a file's path) is, is under, or holds a place root runs
 * code from: the list, and `extra` (Puppet's own directories, read at run time). Paths are compared
 * as given (normalised, no trailing slash); the walk (privileged/paths.ts) refuses symbolic links
 * on the way, so a link cannot lead into one under another name.
 */
export function rootCodeHit(dir: string, extra: readonly { path: string; why: string }[] = []): RootCodeHit | undefined {
  const d = posix.normalize(dir).replace(/(.)\/+$/, "$1");
  for (const e of [...ROOT_CODE_PATHS, ...extra]) {
    const p = posix.normalize(e.path).replace(/(.)\/+$/, "$1");
    if (d === p) return { path: p, why: e.why, relation: "is" };
    if (under(d, p)) return { path: p, why: e.why, relation: "is under" };
    if (under(p, d)) return { path: p, why: e.why, relation: "holds" };
  }
  return undefined;
}

/**
 * Why a `file` at `path` may not be written: its file_paths directory (any of `filePaths` it is
 * under), or the path itself, meets a place root runs code from; undefined when none does.
 */
export function rootCodeRefusal(path: string, filePaths: readonly string[], extra: readonly { path: string; why: string }[] = []): string | undefined {
  const within = filePaths.filter((d) => path.startsWith(`${d}/`));
  for (const p of [...within, path]) {
    const hit = rootCodeHit(p, extra);
    if (hit) return `${p === path ? "" : "plugins.resource.file_paths directory "}${p} ${hit.relation} ${hit.path}, where root runs or loads code from (${hit.why}): a file written there would run as root; use a data directory such as /srv/files`;
  }
  return undefined;
}
