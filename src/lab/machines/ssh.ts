import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { LabMachinesState, LabNodeMachine } from "./state.js";

// The operator's way into the machines: the lab's SSH key (root on every machine, through each
// machine's cloud-init), the ssh_config that names the machines (`muster ssh` and `ssh -F` use it),
// and the known hosts, learnt on first contact.

/** The lab's SSH key pair (made once) and the files ssh reads for the machines. */
export function labSshKey(dir: string): LabMachinesState["ssh"] {
  const sshDir = join(dir, "ssh");
  mkdirSync(sshDir, { recursive: true, mode: 0o700 });
  const key = join(sshDir, "id_ed25519");
  if (!existsSync(key)) execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "muster-lab", "-f", key], { stdio: "ignore" });
  const config = join(sshDir, "config");
  const knownHosts = join(sshDir, "known_hosts");
  if (!existsSync(config)) writeFileSync(config, "# muster lab: the machines, as the operator's ssh reaches them (rewritten as machines come and go)\n");
  return { key, config, knownHosts };
}

/**
 * The ssh_config naming every machine (pure): `ssh -F <config> node01.eu.lab`. Host keys are known
 * by identity (HostKeyAlias), not by the loopback relay's address and port, which change.
 */
export function sshConfigText(ssh: LabMachinesState["ssh"], nodes: { identity: string; machine?: LabNodeMachine }[]): string {
  const blocks = nodes
    .filter((n) => n.machine)
    .map((n) =>
      [
        `Host ${n.identity}`,
        `  HostName ${n.machine!.ssh.host}`,
        `  Port ${n.machine!.ssh.port}`,
        `  HostKeyAlias ${n.identity}`,
        "  User root",
        `  IdentityFile ${ssh.key}`,
        "  IdentitiesOnly yes",
        `  UserKnownHostsFile ${ssh.knownHosts}`,
        // each machine makes its host keys on first boot: learnt on first contact, refused if they
        // change; a machine made again under a name is forgotten first (forgetHostKey)
        "  StrictHostKeyChecking accept-new",
        "  LogLevel ERROR",
        "",
      ].join("\n"),
    );
  return `# muster lab: the machines, as the operator's ssh reaches them (rewritten as machines come and go)\n\n${blocks.join("\n")}`;
}

/** Rewrite the ssh_config naming every machine (muster ssh uses it). */
export function writeSshConfig(ms: LabMachinesState, nodes: { identity: string; machine?: LabNodeMachine }[]): void {
  writeFileSync(ms.ssh.config, sshConfigText(ms.ssh, nodes));
}

/** Forget a machine's host key: a new machine under that name makes new keys on its first boot. */
export function forgetHostKey(ms: LabMachinesState, identity: string): void {
  if (existsSync(ms.ssh.knownHosts)) spawnSync("ssh-keygen", ["-q", "-f", ms.ssh.knownHosts, "-R", identity], { stdio: "ignore" });
}
