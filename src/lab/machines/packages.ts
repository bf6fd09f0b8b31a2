import { execFile } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { MusterError } from "../../errors.js";
import { waitForPort } from "../nats.js";
import { freePort } from "../ports.js";
import { spawnMuster, type MusterProcess } from "../processes.js";
import { PACKAGE_PORT, RELAY_ADDRESS } from "./addresses.js";

/** The muster command operators render user-data with (docs/deploy.md): argv[0] of every render. */
export const USER_DATA_COMMAND = "user-data";
import type { LabPackages } from "./state.js";

// What the machines install, as a cloud's apt mirror serves it: the .deb (built from this checkout
// when the operator names none), the lab's signed apt repository holding it, and the package
// server (`muster lab serve-packages`, package-server.ts) that serves the repository on loopback.

const execFileP = promisify(execFile);
const REPO = fileURLToPath(new URL("../../../../", import.meta.url));

/** A file of this checkout's packaging/ (the package builder, the apt repository, the cloud-init renderer). */
export const packagingFile = (name: string) => join(REPO, "packaging", name);

/** Build the package machines install, when the operator named none (gzip: the contents are the release's). */
export async function buildLabPackage(outDir: string, progress: (l: string) => void): Promise<string> {
  progress("building the package machines install (node packaging/build-deb.mjs --compress gzip --level 1); about 10 s");
  const r = await execFileP(process.execPath, [packagingFile("build-deb.mjs"), "--out", outDir, "--compress", "gzip", "--level", "1"], { maxBuffer: 64 << 20 });
  const deb = r.stdout.trim().split("\n").at(-1)!;
  if (!deb.endsWith(".deb") || !existsSync(deb)) throw new MusterError("MUSTER_USAGE", `packaging/build-deb.mjs did not print a .deb path (it printed ${JSON.stringify(deb)})`);
  return deb;
}

/**
 * Add a .deb to the lab's apt repository and sign it again (packaging/apt-repo.mjs, with the lab's
 * own signing key, made on first use): machines get it with `apt-get update && apt-get upgrade`.
 */
export async function publishToRepo(repo: string, gnupgHome: string, deb: string): Promise<{ repo: string; key: string }> {
  try {
    await execFileP(process.execPath, [packagingFile("apt-repo.mjs"), "--repo", repo, "--gnupg-home", gnupgHome, deb], { maxBuffer: 16 << 20 });
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `packaging/apt-repo.mjs could not add ${deb} to the lab's repository: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
  return { repo, key: join(repo, "muster-archive-keyring.asc") };
}

/**
 * The lab's package server: the .deb (built now when `deb` is absent) in a signed apt repository,
 * served on loopback; machines reach it through a relay at PACKAGE_PORT.
 */
export async function startLabPackages(o: { labDir: string; deb?: string; detached: boolean; track: (name: string, p: MusterProcess) => void; progress: (l: string) => void }): Promise<LabPackages> {
  const dir = resolve(o.labDir);
  const pkgDir = join(dir, "packages");
  mkdirSync(pkgDir, { recursive: true });
  mkdirSync(join(dir, "logs"), { recursive: true });
  const deb = o.deb ? resolve(o.deb) : await buildLabPackage(join(dir, "build"), o.progress);
  const gnupgHome = join(dir, "apt-signing");
  const repo = await publishToRepo(join(pkgDir, "apt"), gnupgHome, deb);
  const pkgPort = await freePort("127.0.0.1");
  const pkgLog = join(dir, "logs", "packages.log");
  const server = spawnMuster(["lab", "serve-packages", "--dir", pkgDir, "--port", String(pkgPort)], { logFile: pkgLog, detached: o.detached });
  o.track("package server", server);
  await waitForPackageServer(pkgPort, server, pkgLog);
  return { dir: pkgDir, deb: basename(deb), url: `http://${RELAY_ADDRESS}:${PACKAGE_PORT}/apt`, key: repo.key, gnupgHome, hostUrl: `http://127.0.0.1:${pkgPort}/`, pid: server.pid, log: pkgLog };
}

/** The package server's port on the host (what the packages relay forwards to). */
export const packageServerPort = (p: LabPackages) => Number(new URL(p.hostUrl).port);

/** Resolves once the package server listens; rejects, pointing at its log, if it exits first or stays silent. */
async function waitForPackageServer(port: number, server: MusterProcess, log: string): Promise<void> {
  const died = server.exited.then((code) => Promise.reject(new MusterError("MUSTER_USAGE", `the lab's package server exited (${code}) before it listened (see ${log})`)));
  died.catch(() => undefined); // it may also exit later, when the lab stops
  const listening = waitForPort("127.0.0.1", port, 15_000).catch(() => Promise.reject(new MusterError("MUSTER_TIMEOUT", `the lab's package server did not listen on 127.0.0.1:${port} within 15 s (see ${log})`)));
  await Promise.race([listening, died]);
}
