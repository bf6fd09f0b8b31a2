import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { MusterError } from "../../errors.js";

// The lab's Debian mirror: what a cloud's own Debian mirror is to its instances. The site's roles
// install Debian's packages at first boot, as docs/deploy.md tells an operator to (`apt-get install
// nats-server`, `apt-get install puppetserver muster`), but the lab's network has no route out. So
// the image build, the lab's only network access, also downloads those packages and their
// dependencies from Debian (the same mirror and release as the image) into a small apt repository
// that the lab signs with a key of the image's own; the image's apt sources name that repository,
// served by the lab's package server at http://<relay>/debian/<release>. A machine's `apt-get update
// && apt-get install puppetserver` then runs as it would in a cloud.

const execFileP = promisify(execFile);
const REPO = fileURLToPath(new URL("../../../../", import.meta.url));

/** Debian packages some site role installs at first boot (not in the image): they are in the mirror. */
export const MIRROR_PACKAGES = ["nats-server", "puppetserver", "puppet-terminus-puppetdb", "postgresql", "puppetdb"] as const;

/** Where the mirrors are served on the package server (debian/<release>), and where its key lives in the image. */
export const MIRROR_PATH = "debian";
export const MIRROR_KEYRING = "/etc/apt/keyrings/muster-lab-debian.asc";

/** The image's apt sources (deb822): the lab's mirror alone, signed by the image's key. */
export function mirrorSources(baseUrl: string, release: string): string {
  return [
    "# muster lab: Debian's packages from the lab's mirror (the lab network has no route out);",
    "# the image build downloaded them from Debian and signed this subset with the image's own key",
    "Types: deb",
    `URIs: ${baseUrl.replace(/\/$/, "")}/${MIRROR_PATH}/${release}`,
    `Suites: ${release}`,
    "Components: main",
    `Signed-By: ${MIRROR_KEYRING}`,
    "",
  ].join("\n");
}

/**
 * The host's apt sources with its release swapped for another (bookworm -> trixie, with -updates
 * and -security alike), so an image of any release comes from the mirror the host uses. Pure.
 */
export function sourcesForRelease(hostSources: string, hostRelease: string, release: string): string {
  if (hostRelease === release) return hostSources;
  return hostSources.replace(new RegExp(`\\b${hostRelease}(?=[-\\s/]|$)`, "gm"), release);
}

/**
 * Download `packages` and whatever they need beyond what the image root has (apt-get in the image,
 * still on the build's network), and make a signed apt repository of them in `out` (packaging/
 * apt-repo.mjs, suite = the release). `root` is the image being built; its apt cache is left empty.
 * Returns the armored public key the image must trust.
 */
export async function buildMirror(o: { root: string; out: string; release: string; packages: readonly string[]; progress: (l: string) => void }): Promise<{ keyText: string; debs: number }> {
  const apt = (args: string[]) => execFileP("chroot", [o.root, "apt-get", "-q", "-y", ...args], { maxBuffer: 64 << 20, env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
  o.progress(`downloading ${o.packages.join(", ")} and their dependencies for the lab's Debian mirror (${o.release})`);
  try {
    await apt(["update"]);
    await apt(["install", "--download-only", "--no-install-recommends", ...o.packages]);
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `could not download ${o.packages.join(" ")} for the lab's mirror: ${(e as { stderr?: string }).stderr?.trim().split("\n").slice(-5).join("\n") || (e as Error).message}`);
  }
  const cache = join(o.root, "var", "cache", "apt", "archives");
  const debsDir = join(o.out, "incoming");
  mkdirSync(debsDir, { recursive: true });
  const debs = readdirSync(cache).filter((f) => f.endsWith(".deb"));
  for (const d of debs) renameSync(join(cache, d), join(debsDir, d));
  await apt(["clean"]);
  rmSync(join(o.root, "var", "lib", "apt", "lists"), { recursive: true, force: true });
  mkdirSync(join(o.root, "var", "lib", "apt", "lists", "partial"), { recursive: true });
  const gnupgHome = join(o.out, "signing");
  const repo = join(o.out, "repo");
  const script = `import { writeAptRepo } from ${JSON.stringify(join(REPO, "packaging", "apt-repo.mjs"))};
writeAptRepo({ repo: ${JSON.stringify(repo)}, debs: process.argv.slice(1), gnupgHome: ${JSON.stringify(gnupgHome)}, suite: ${JSON.stringify(o.release)}, pool: "debian" });`;
  await execFileP(process.execPath, ["--input-type=module", "-e", script, ...debs.map((d) => join(debsDir, d))], { maxBuffer: 16 << 20 });
  rmSync(debsDir, { recursive: true, force: true });
  const keyFile = join(repo, "muster-archive-keyring.asc");
  if (!existsSync(keyFile)) throw new MusterError("MUSTER_USAGE", `the lab's mirror in ${repo} has no public key after signing`);
  writeFileSync(join(o.out, "packages.txt"), `${o.packages.join("\n")}\n`);
  return { keyText: readFileSync(keyFile, "utf8"), debs: debs.length };
}
