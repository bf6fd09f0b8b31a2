import { chmodSync, existsSync, linkSync, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from "node:fs";
import { homedir, userInfo } from "node:os";
import { dirname, join } from "node:path";
import { MusterError } from "../errors.js";
import { generateSigningKey, publicKeyObject, signingKeyFromPem, type SigningKey } from "../protocol/signing.js";
import type { KeyObject } from "node:crypto";

// Keys live under the user's muster config dir. The first run creates the user's signing key so a
// single user on one machine needs no set-up; servers started by that user trust it by default.

export function configDir(): string {
  if (process.env.MUSTER_CONFIG_DIR) return process.env.MUSTER_CONFIG_DIR;
  const base = process.env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "muster");
}

export function defaultCallerName(): string {
  return process.env.MUSTER_CALLER || `user=${userInfo().username}`;
}

/** Where the named caller's signing key lives (its public half next to it as `.pub`). */
export function signingKeyFile(name = defaultCallerName()): string {
  return keyFile(name);
}

function keyFile(name: string): string {
  return join(configDir(), "keys", `${name.replace(/[^A-Za-z0-9_.=@-]/g, "_")}.pem`);
}

/**
 * Creates `file` with `text`, whole or not at all: written to a private temporary name, then linked
 * into place (EEXIST when another process got there first). Two commands started at once by the
 * same user (a lab, a test) used to read the other's half-written key.
 */
function createWhole(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600, flag: "wx" });
  try {
    chmodSync(tmp, 0o600);
    linkSync(tmp, file);
  } finally {
    unlinkSync(tmp);
  }
}

/** Load the named signing key, creating it (mode 0600) on first use. */
export function loadOrCreateSigningKey(name = defaultCallerName(), path?: string): SigningKey {
  const file = path ?? keyFile(name);
  try {
    if (existsSync(file)) return signingKeyFromPem(name, readFileSync(file, "utf8"));
    if (path) throw new Error(`no key at ${path}`);
    mkdirSync(join(configDir(), "keys"), { recursive: true, mode: 0o700 });
    const { key, pem } = generateSigningKey(name);
    createWhole(file, pem);
    writeFileSync(file.replace(/\.pem$/, ".pub"), `${key.publicKey}\n`);
    return key;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return signingKeyFromPem(name, readFileSync(file, "utf8"));
    throw new MusterError("MUSTER_KEY_ERROR", `cannot load or create signing key ${file}: ${(e as Error).message}. Check the directory's permissions or set MUSTER_CONFIG_DIR.`, { cause: e });
  }
}

/**
 * Make a new signing key for `name` in `dir` (`<name>.pem`, 0600, and `<name>.pub`), refusing to
 * replace one: a service's key made once on the operator's workstation (the provisioners' shared
 * key, the console's) before the machines that use it and the nodes that trust it are rendered.
 */
export function createSigningKey(name: string, dir: string): { key: SigningKey; file: string; pub: string } {
  const file = join(dir, `${name.replace(/[^A-Za-z0-9_.=@-]/g, "_")}.pem`);
  const pub = file.replace(/\.pem$/, ".pub");
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const { key, pem } = generateSigningKey(name);
    createWhole(file, pem);
    writeFileSync(pub, `${key.publicKey}\n`);
    return { key, file, pub };
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === "EEXIST" ? "it exists already (a new key would untrust every machine that trusts the old one: delete it yourself if that is what you want)" : (e as Error).message;
    throw new MusterError("MUSTER_KEY_ERROR", `cannot create signing key ${file}: ${why}`, { cause: e });
  }
}

/** Where a node keeps its own key unless `security.node_key` says otherwise. */
export function defaultNodeKeyFile(identity: string): string {
  return join(configDir(), "nodes", `${identity.replace(/[^A-Za-z0-9_.=@-]/g, "_")}.key`);
}

/**
 * The node key (docs/security.md#node-keys): the node signs every reply and event with it. Created
 * 0600 at first start, in a 0700 directory; its public half is reported to the provisioner, which
 * pins it.
 */
export function loadOrCreateNodeKey(identity: string, path = defaultNodeKeyFile(identity)): SigningKey {
  try {
    if (existsSync(path)) return signingKeyFromPem(identity, readFileSync(path, "utf8"));
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const { key, pem } = generateSigningKey(identity);
    createWhole(path, pem);
    return key;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return signingKeyFromPem(identity, readFileSync(path, "utf8"));
    throw new MusterError("MUSTER_KEY_ERROR", `cannot load or create the node key ${path}: ${(e as Error).message}. Check the directory's permissions or set security.node_key.`, { cause: e });
  }
}

export interface TrustedKey {
  name: string;
  key: string; // base64 raw
  /** Where it was configured, for error messages (a .pub file; default security.trusted_keys). */
  source?: string;
}

function trustedKeyObject(k: TrustedKey): KeyObject {
  try {
    return publicKeyObject(k.key);
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `trusted key '${k.name}' in ${k.source ?? "security.trusted_keys"} is not an ed25519 public key (base64 of 32 bytes, as in a .pub file): ${(e as Error).message}`);
  }
}

/** Maps public keys to caller names. A request is trusted only if its pubkey is here under its caller name. */
export class TrustStore {
  private readonly byKey = new Map<string, { name: string; obj: KeyObject }>();
  constructor(keys: TrustedKey[]) {
    for (const k of keys) this.add(k);
  }
  add(k: TrustedKey): void {
    this.byKey.set(k.key, { name: k.name, obj: trustedKeyObject(k) });
  }
  lookup(pubkey: string): { name: string; obj: KeyObject } | undefined {
    return this.byKey.get(pubkey);
  }
  get size(): number {
    return this.byKey.size;
  }
  names(): string[] {
    return [...this.byKey.values()].map((v) => v.name).sort();
  }
}

/** Reads `<name>.pub` files (base64 raw ed25519) from a directory; the file name is the caller name. */
export function readTrustedKeyDir(dir: string): TrustedKey[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".pub"))
    .map((f) => {
      const k = { name: f.slice(0, -4), key: readFileSync(join(dir, f), "utf8").trim(), source: join(dir, f) };
      trustedKeyObject(k); // refuse a bad file by its path, at start-up
      return k;
    });
}
