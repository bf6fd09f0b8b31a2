#!/usr/bin/env node
// Writes (or adds to) a signed apt repository holding muster's .deb files: the layout Debian's own
// archives have (dists/<suite>/Release, InRelease and Release.gpg, main/binary-<arch>/Packages, pool/),
// made by apt-ftparchive (apt-utils) and signed with gpg. `npm run package` runs it after
// build-deb.mjs; a node then needs one sources.list line and one keyring file (docs/deploy.md).
//
//   node packaging/apt-repo.mjs [--repo DIR] [--gnupg-home DIR] [--suite NAME] DEB...
//
// --repo: default build/apt. Every .deb given is added to its pool; the versions already there
// stay, so `apt-get install muster=<older>` can roll back. --gnupg-home: the operator's signing
// key, default $MUSTER_APT_GNUPGHOME, else ~/.config/muster/apt-signing; made once, on the first
// run, and reused ever after (back it up: losing it means every node needs a new keyring file).
// --suite: default stable. Prints the repository's path as its last line.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const USAGE = "usage: node packaging/apt-repo.mjs [--repo DIR] [--gnupg-home DIR] [--suite NAME] DEB...";
export const KEYRING = "muster-archive-keyring.gpg";
export const KEY_UID = "muster apt repository <muster@example.net>";
const say = (line) => process.stderr.write(`apt-repo: ${line}\n`);

export function defaultGnupgHome() {
  return process.env.MUSTER_APT_GNUPGHOME || join(homedir(), ".config", "muster", "apt-signing");
}

/** The signing key's fingerprint, made the first time (ed25519, no passphrase: a build machine signs unattended). */
export function ensureSigningKey(gnupgHome) {
  mkdirSync(gnupgHome, { recursive: true, mode: 0o700 });
  chmodSync(gnupgHome, 0o700);
  const gpg = (args, o = {}) => execFileSync("gpg", ["--homedir", gnupgHome, "--batch", "--quiet", ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...o });
  const list = () => gpg(["--list-secret-keys", "--with-colons", KEY_UID]).split("\n").find((l) => l.startsWith("fpr:"))?.split(":")[9];
  let fpr;
  try {
    fpr = list();
  } catch {
    fpr = undefined;
  }
  if (!fpr) {
    say(`no signing key in ${gnupgHome}: making one (once; keep this directory safe)`);
    gpg(["--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never"]);
    fpr = list();
  }
  if (!fpr) throw new Error(`gpg made no key in ${gnupgHome}`);
  return fpr;
}

/** Add `debs` to the repository at `repo` and re-sign it. Returns the repository's paths. */
export function writeAptRepo({ repo, debs, gnupgHome = defaultGnupgHome(), suite = "stable", component = "main", pool: poolName = "muster" }) {
  repo = resolve(repo);
  const fpr = ensureSigningKey(gnupgHome);
  // pool/<component>/<first letter>/<name>/, as Debian's archive lays out a source package's files
  const pool = join(repo, "pool", component, poolName[0], poolName);
  mkdirSync(pool, { recursive: true });
  for (const d of debs) copyFileSync(d, join(pool, basename(d)));
  const run = (cmd, args) => execFileSync(cmd, args, { cwd: repo, encoding: "utf8", maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "inherit"] });
  // One Packages index per architecture in the pool (and `all`).
  const archs = [...new Set(readdirSync(pool).map((f) => /_([a-z0-9]+)\.deb$/.exec(f)?.[1]).filter(Boolean))].sort();
  const dist = join(repo, "dists", suite);
  rmSync(dist, { recursive: true, force: true });
  for (const arch of archs) {
    const dir = join(dist, component, `binary-${arch}`);
    mkdirSync(dir, { recursive: true });
    const packages = run("apt-ftparchive", ["--arch", arch, "packages", join("pool", component)]);
    writeFileSync(join(dir, "Packages"), packages);
    writeFileSync(join(dir, "Packages.gz"), gzipSync(packages, { level: 9 }));
  }
  const release = run("apt-ftparchive", [
    "-o", "APT::FTPArchive::Release::Origin=muster",
    "-o", "APT::FTPArchive::Release::Label=muster",
    "-o", `APT::FTPArchive::Release::Suite=${suite}`,
    "-o", `APT::FTPArchive::Release::Codename=${suite}`,
    "-o", `APT::FTPArchive::Release::Components=${component}`,
    "-o", `APT::FTPArchive::Release::Architectures=${archs.join(" ")}`,
    "release", join("dists", suite),
  ]);
  writeFileSync(join(dist, "Release"), release);
  const gpg = (args) => execFileSync("gpg", ["--homedir", gnupgHome, "--batch", "--quiet", "--yes", "--local-user", fpr, ...args], { cwd: dist, stdio: ["ignore", "pipe", "inherit"] });
  gpg(["--clearsign", "--digest-algo", "SHA512", "--output", "InRelease", "Release"]);
  gpg(["--armor", "--detach-sign", "--digest-algo", "SHA512", "--output", "Release.gpg", "Release"]);
  // The public key, as the keyring file a node puts beside its sources line (binary and armored).
  const pub = (armor) => execFileSync("gpg", ["--homedir", gnupgHome, "--batch", "--quiet", ...(armor ? ["--armor"] : []), "--export", fpr]);
  writeFileSync(join(repo, KEYRING), pub(false));
  writeFileSync(join(repo, KEYRING.replace(/\.gpg$/, ".asc")), pub(true));
  writeFileSync(
    join(repo, "muster.list"),
    `# /etc/apt/sources.list.d/muster.list (with ${KEYRING} in /etc/apt/keyrings/); URL: where this directory is served\ndeb [signed-by=/etc/apt/keyrings/${KEYRING}] https://APT.EXAMPLE.NET/muster ${suite} ${component}\n`,
  );
  // gpg started an agent for the secret key: stop it, so a build leaves no process behind.
  try {
    execFileSync("gpgconf", ["--homedir", gnupgHome, "--kill", "all"], { stdio: "ignore" });
  } catch {
    /* no gpgconf: the agent exits with its idle timeout */
  }
  say(`${repo}: ${readdirSync(pool).length} package(s) in the pool, ${suite}/${component} for ${archs.join(", ")}, signed by ${fpr}`);
  return { repo, fingerprint: fpr, keyring: join(repo, KEYRING), suite, component };
}

// As a command.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  const o = { repo: join(root, "build", "apt"), "gnupg-home": defaultGnupgHome(), suite: "stable" };
  const debs = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === "--help" || k === "-h") {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (k.startsWith("--")) {
      const name = k.slice(2);
      if (!(name in o) || argv[i + 1] === undefined) {
        process.stderr.write(`${argv[i + 1] === undefined ? `${k} needs a value` : `unknown argument ${k}`}\n${USAGE}\n`);
        process.exit(64);
      }
      o[name] = argv[++i];
    } else debs.push(k);
  }
  for (const d of debs) {
    if (!existsSync(d) || !d.endsWith(".deb")) {
      process.stderr.write(`${d}: not a .deb file (build one with node packaging/build-deb.mjs)\n${USAGE}\n`);
      process.exit(64);
    }
  }
  if (!debs.length && !existsSync(join(o.repo, "pool"))) {
    process.stderr.write(`no .deb given and no repository at ${o.repo} to re-sign\n${USAGE}\n`);
    process.exit(64);
  }
  const r = writeAptRepo({ repo: o.repo, debs, gnupgHome: o["gnupg-home"], suite: o.suite });
  process.stdout.write(`${r.repo}\n`);
}
