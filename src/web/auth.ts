import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { MusterError } from "../errors.js";

// Who is asking, and may they? Pure: token-file parsing, roles, sessions and CSRF tokens. The
// fastify edge (server.ts) reads credentials off the request and asks these.

export const Roles = ["viewer", "operator"] as const;
export type Role = (typeof Roles)[number];

export interface Principal {
  name: string;
  role: Role;
  /** How they proved it: a session cookie, a bearer token, a TLS client certificate. */
  via: "session" | "token" | "certificate";
}

/** May `role` do what needs `need`? Operators may do everything viewers may. */
export function allowed(role: Role, need: Role): boolean {
  return need === "viewer" || role === "operator";
}

const MIN_TOKEN = 16;

/** One line of a tokens file. */
export interface TokenEntry {
  token: string;
  role: Role;
  name: string;
}

/**
 * A tokens file: one `<token> <role> <name>` per line; blank lines and `#` comments ignored.
 * Tokens must be at least 16 characters and unique. Errors name the line.
 */
export function tokenEntries(text: string, file = "tokens file"): TokenEntry[] {
  const out: TokenEntry[] = [];
  const seen = new Set<string>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith("#")) return;
    const where = `${file} line ${i + 1}`;
    const parts = line.split(/\s+/);
    if (parts.length !== 3) throw new MusterError("MUSTER_CONFIG_INVALID", `${where}: expected "<token> <role> <name>" (three fields), got ${parts.length}`);
    const [token, role, name] = parts as [string, string, string];
    if (token.length < MIN_TOKEN) throw new MusterError("MUSTER_CONFIG_INVALID", `${where}: the token is shorter than ${MIN_TOKEN} characters (make one with: openssl rand -hex 24)`);
    if (!(Roles as readonly string[]).includes(role)) throw new MusterError("MUSTER_CONFIG_INVALID", `${where}: role ${JSON.stringify(role)} is not one of ${Roles.join(", ")}`);
    if (seen.has(token)) throw new MusterError("MUSTER_CONFIG_INVALID", `${where}: this token is already on an earlier line; every token must be unique`);
    seen.add(token);
    out.push({ token, role: role as Role, name });
  });
  return out;
}

/** The tokens file by token digest (no plain tokens kept in memory). */
export function parseTokensFile(text: string, file = "tokens file"): Map<string, { name: string; role: Role }> {
  return new Map(tokenEntries(text, file).map((e) => [digest(e.token), { name: e.name, role: e.role }]));
}

const digest = (s: string) => createHash("sha256").update(s).digest("hex");

/** Token lookup by digest: the same time whatever the token, and no plain tokens kept in memory. */
export class TokenTable {
  constructor(private readonly byDigest: Map<string, { name: string; role: Role }>) {}

  static fromText(text: string, file?: string): TokenTable {
    return new TokenTable(parseTokensFile(text, file));
  }

  get size(): number {
    return this.byDigest.size;
  }

  lookup(token: string): { name: string; role: Role } | undefined {
    const want = Buffer.from(digest(token), "hex");
    for (const [d, who] of this.byDigest) if (timingSafeEqual(Buffer.from(d, "hex"), want)) return who;
    return undefined;
  }
}

/**
 * The role of a TLS client certificate from the configured map. Keys are the subject's common
 * name (`alice`) or `CN=alice`; undefined when the certificate is not in the map.
 */
export function certificateRole(roles: Record<string, Role>, subjectCN: string | undefined): Role | undefined {
  if (!subjectCN) return undefined;
  return Object.hasOwn(roles, subjectCN) ? roles[subjectCN] : Object.hasOwn(roles, `CN=${subjectCN}`) ? roles[`CN=${subjectCN}`] : undefined;
}

export interface Session {
  id: string;
  name: string;
  role: Role;
  expires: number;
}

/** Browser sessions, in memory (a restart logs everyone out, which is the safe direction). */
export class SessionStore {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly ttlMs = 12 * 3600_000) {}

  create(name: string, role: Role, now = Date.now()): Session {
    this.prune(now);
    const s: Session = { id: randomBytes(24).toString("base64url"), name, role, expires: now + this.ttlMs };
    this.sessions.set(s.id, s);
    return s;
  }

  get(id: string | undefined, now = Date.now()): Session | undefined {
    if (!id) return undefined;
    const s = this.sessions.get(id);
    if (!s) return undefined;
    if (s.expires <= now) {
      this.sessions.delete(id);
      return undefined;
    }
    return s;
  }

  delete(id: string | undefined): void {
    if (id) this.sessions.delete(id);
  }

  private prune(now: number): void {
    for (const [id, s] of this.sessions) if (s.expires <= now) this.sessions.delete(id);
  }
}

/**
 * CSRF tokens: an HMAC of the caller's credential under a per-process secret, so every way of
 * authenticating (session, bearer token, certificate) has one without server-side storage.
 */
export class Csrf {
  private readonly secret: Buffer;

  constructor(secret: Buffer = randomBytes(32)) {
    this.secret = secret;
  }

  tokenFor(credential: string): string {
    return createHmac("sha256", this.secret).update(credential).digest("base64url");
  }

  check(credential: string, sent: string | undefined): boolean {
    if (!sent) return false;
    const want = Buffer.from(this.tokenFor(credential));
    const got = Buffer.from(sent);
    return got.length === want.length && timingSafeEqual(got, want);
  }
}

/**
 * Where to go after logging in: the console page the browser was sent to (the login form carries
 * its fragment, `#/node/web01`), else the board. Only a fragment of this console: never another
 * site or path (an open redirect).
 */
export function afterLogin(next: unknown): string {
  if (typeof next !== "string" || next.length > 2048 || !/^#\/[A-Za-z0-9\-._~%!$&'()*+,;=:@/?]*$/.test(next)) return "/";
  return `/${next}`;
}
