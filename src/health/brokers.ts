import type { ServiceCheck } from "../protocol/service.js";

// Broker members as services of the site (docs/fleet.md#the-sites-services). nats-server runs no
// muster, so it writes no heartbeat: the console asks each member's monitoring port (/varz,
// /routez, /jsz) every few seconds and writes what it saw as the member's beat, as its observer.
// Pure: what each member answered in, each member's checks out:
//   answers     its monitoring port answers (its name, version, uptime);
//   routes      it has a route to every other member that answers;
//   meta group  the JetStream meta group's leader counts it (a member left out holds no copy of
//               anything: docs/deploy.md, "A member left out of the meta group");
//   streams     its copy of each replicated stream is current, as the stream's leader reports it,
//               or lagging by how many operations, last heard from how long ago; or stuck: its
//               own last sequence apart from the leader's own, unmoved (stuckCopies).
// A stream's copies are judged only from its leader's answer: a follower's /jsz says little of
// the others (seen: each follower reporting the other as not current while the leader counted both).

/** One member's answers (or why it gave none). */
export interface MemberLook {
  /** Its monitoring URL. */
  url: string;
  /** Its server_name when it did not answer (remembered from an earlier look), else a name from its URL. */
  knownName?: string;
  error?: string;
  varz?: unknown;
  routez?: unknown;
  jsz?: unknown;
}

export interface BrokerVerdict {
  name: string;
  answers: boolean;
  checks: ServiceCheck[];
  details: Record<string, unknown>;
}

const obj = (x: unknown): Record<string, unknown> => (typeof x === "object" && x !== null && !Array.isArray(x) ? (x as Record<string, unknown>) : {});
const arr = (x: unknown): unknown[] => (Array.isArray(x) ? x : []);
const str = (x: unknown): string | undefined => (typeof x === "string" && x ? x : undefined);
const num = (x: unknown): number | undefined => (typeof x === "number" && Number.isFinite(x) ? x : undefined);

/** A member's name when it never answered: its URL's host, first label ("nats3" for nats3.example.net). */
export function nameFromUrl(url: string): string {
  try {
    const h = new URL(url).hostname;
    return /^[\d.]+$/.test(h) || h.includes(":") ? `${h}_${new URL(url).port}` : h.split(".")[0]!;
  } catch {
    return "broker";
  }
}

interface Replica {
  name: string;
  current: boolean;
  lag: number;
  /** Seconds since the leader last heard from it. */
  activeS: number | null;
}

interface StreamView {
  name: string;
  leader: string;
  replicas: Replica[];
}

/** Replicated streams as their leaders report them (a stream whose leader did not answer is left out). */
function leaderStreams(answering: { name: string; jsz: Record<string, unknown> }[]): StreamView[] {
  const out = new Map<string, StreamView>();
  for (const m of answering) {
    for (const acc of arr(m.jsz.account_details)) {
      for (const sd of arr(obj(acc).stream_detail)) {
        const s = obj(sd);
        const c = obj(s.cluster);
        const name = str(s.name);
        if (!name || str(c.leader) !== m.name) continue;
        const replicas = arr(c.replicas)
          .map(obj)
          .filter((r) => str(r.name) && str(r.name) !== m.name)
          .map((r) => ({ name: str(r.name)!, current: r.current === true, lag: num(r.lag) ?? 0, activeS: num(r.active) !== undefined ? Math.round(num(r.active)! / 1e9) : null }));
        if (replicas.length) out.set(`${str(obj(acc).name) ?? ""}/${name}`, { name, leader: m.name, replicas });
      }
    }
  }
  return [...out.values()];
}

/** How long a member's own copy may differ from its leader's, unmoved, before it is called stuck. */
export const STUCK_COPY_MS = 30_000;

/** A member's copy of a stream seen differing from its leader's copy: at which sequence, since when. */
export interface CopyMark {
  seq: number;
  since: number;
}

/** A copy whose own last sequence has differed from its leader's, unmoved, for STUCK_COPY_MS or more. */
export interface StuckCopy {
  member: string;
  stream: string;
  leader: string;
  seq: number;
  leaderSeq: number;
  /** When it was first seen apart at this sequence (ms): one stuck spell, one alert. */
  since: number;
  forS: number;
}

/**
 * Copies that stay apart from their leader's (what each member reports of its own copy, /jsz
 * state.last_seq). nats-server 2.10 can leave a member back from a power cut with a copy that
 * never catches up while the leader counts it current (docs/deploy.md#a-broker-back-from-a-power-cut);
 * the leader's lag says nothing then, the copy's own sequence does. Such a copy is no spare: should
 * the leader restart before it is rebuilt, it can be elected with its old state and the writes it
 * missed are gone (a site e2e: a provisioned node's record went back to its sign_csr). A copy behind
 * but moving is catching up; one apart from the leader for one look is the looks' own timing.
 * Pure: `marks` are the previous look's, the new ones are returned.
 */
export function stuckCopies(looks: readonly MemberLook[], now: number, marks: ReadonlyMap<string, CopyMark>): { stuck: StuckCopy[]; marks: Map<string, CopyMark> } {
  const own = new Map<string, Map<string, { seq: number; leader?: string }>>(); // stream key -> member -> its copy
  for (const l of looks) {
    if (l.error || l.varz === undefined) continue;
    const me = str(obj(l.varz).server_name);
    if (!me) continue;
    for (const acc of arr(obj(l.jsz).account_details)) {
      for (const sd of arr(obj(acc).stream_detail)) {
        const s = obj(sd);
        const name = str(s.name);
        const seq = num(obj(s.state).last_seq);
        if (!name || seq === undefined || !s.cluster) continue;
        const key = `${str(obj(acc).name) ?? ""}/${name}`;
        const leader = str(obj(s.cluster).leader);
        own.set(key, (own.get(key) ?? new Map()).set(me, { seq, ...(leader ? { leader } : {}) }));
      }
    }
  }
  const next = new Map<string, CopyMark>();
  const stuck: StuckCopy[] = [];
  for (const [key, copies] of own) {
    // the leader as it says so itself, and its own copy
    const leader = [...copies].find(([m, c]) => c.leader === m)?.[0];
    const lead = leader ? copies.get(leader)! : undefined;
    if (!leader || !lead) continue;
    for (const [member, c] of copies) {
      if (member === leader || c.seq === lead.seq) continue;
      const markKey = `${member} ${key}`;
      const prev = marks.get(markKey);
      const mark = prev && prev.seq === c.seq ? prev : { seq: c.seq, since: now };
      next.set(markKey, mark);
      if (now - mark.since >= STUCK_COPY_MS) stuck.push({ member, stream: key.slice(key.indexOf("/") + 1), leader, seq: c.seq, leaderSeq: lead.seq, since: mark.since, forS: Math.round((now - mark.since) / 1000) });
    }
  }
  return { stuck, marks: next };
}

const stuckWhy = (x: StuckCopy) =>
  x.seq < x.leaderSeq
    ? `${x.stream}: its copy has stayed at ${x.seq} for ${x.forS} s while its leader ${x.leader} is at ${x.leaderSeq}`
    : `${x.stream}: its copy is at ${x.seq}, ahead of its leader ${x.leader} at ${x.leaderSeq}, for ${x.forS} s (the leader's copy may lack writes)`;

export function brokerVerdicts(looks: readonly MemberLook[], stuck: readonly StuckCopy[] = []): BrokerVerdict[] {
  const named = looks.map((l) => {
    const v = obj(l.varz);
    return { look: l, name: str(v.server_name) ?? l.knownName ?? nameFromUrl(l.url), id: str(v.server_id), varz: v, answers: !l.error && l.varz !== undefined };
  });
  const answering = named.filter((m) => m.answers);
  const byId = new Map(answering.filter((m) => m.id).map((m) => [m.id!, m.name]));
  const clustered = looks.length > 1;
  // the meta group as its leader counts it
  const metas = answering.map((m) => ({ name: m.name, meta: obj(obj(m.look.jsz).meta_cluster) }));
  const leaderView = metas.find((x) => str(x.meta.leader) === x.name && Array.isArray(x.meta.replicas));
  const anyMeta = metas.some((x) => Object.keys(x.meta).length > 0);
  const counted = leaderView ? new Map<string, boolean>([[leaderView.name, true], ...arr(leaderView.meta.replicas).map(obj).filter((r) => str(r.name)).map((r) => [str(r.name)!, r.current === true] as [string, boolean])]) : undefined;
  const streams = leaderStreams(answering.map((m) => ({ name: m.name, jsz: obj(m.look.jsz) })));

  return named.map((m): BrokerVerdict => {
    const checks: ServiceCheck[] = [];
    if (!m.answers) checks.push({ name: "answers", status: "fail", why: `no answer on ${m.look.url}: ${m.look.error ?? "nothing"}` });
    else checks.push({ name: "answers", status: "ok", why: `answers on ${m.look.url} (nats-server ${str(m.varz.version) ?? "?"}, up ${str(m.varz.uptime) ?? "?"})` });
    if (m.answers && clustered) {
      const routes = new Set(arr(obj(m.look.routez).routes).map((r) => byId.get(str(obj(r).remote_id) ?? "") ?? str(obj(r).remote_name)));
      const others = answering.filter((o) => o.name !== m.name).map((o) => o.name);
      const missing = others.filter((o) => !routes.has(o));
      checks.push(missing.length ? { name: "routes", status: "fail", why: `no route to ${missing.join(", ")}, which answer${missing.length === 1 ? "s" : ""}` } : { name: "routes", status: "ok", why: others.length ? `routes to ${others.join(", ")}` : "no other member answers to route to" });
    }
    if (anyMeta) {
      if (!leaderView) checks.push({ name: "meta group", status: "fail", why: "no member that answers leads the JetStream meta group" });
      else if (!counted!.has(m.name)) checks.push({ name: "meta group", status: "fail", why: `the meta group's leader ${leaderView.name} does not count it: it can hold no stream's copy (docs/deploy.md, a member left out of the meta group)` });
      else if (m.name === leaderView.name) checks.push({ name: "meta group", status: "ok", why: `leads it (${counted!.size} of ${num(leaderView.meta.cluster_size) ?? "?"} members counted)` });
      else checks.push({ name: "meta group", status: counted!.get(m.name) || !m.answers ? "ok" : "warn", why: `counted by its leader ${leaderView.name}${counted!.get(m.name) ? "" : ", not current"}` });
    }
    const mine = streams.filter((s) => s.leader === m.name || s.replicas.some((r) => r.name === m.name));
    const myStuck = stuck.filter((x) => x.member === m.name);
    if (myStuck.length) {
      // before lag, which counts such a copy current. Behind: a rebuild gives the member a fresh
      // copy (a restart does not: a site e2e saw the copy come back at the same sequence after the
      // member's own reboot). Ahead: it may hold the only copy of writes its leader lacks, which a
      // rebuild would overwrite with the leader's.
      const ahead = myStuck.some((x) => x.seq > x.leaderSeq);
      const todo = ahead ? `Do not rebuild ${m.name}: compare the members' copies first` : `Rebuild: muster broker stores --rebuild ${m.name}`;
      checks.push({ name: "streams", status: "fail", why: `${myStuck.length} cop${myStuck.length === 1 ? "y" : "ies"} stuck apart from the leader's, no spare should the leader restart: ${myStuck.slice(0, 4).map(stuckWhy).join("; ")}. ${todo} (docs/deploy.md#a-broker-back-from-a-power-cut)` });
    } else if (mine.length) {
      const led = mine.filter((s) => s.leader === m.name).length;
      const behind = mine.flatMap((s) => s.replicas.filter((r) => r.name === m.name && !r.current).map((r) => ({ s, r })));
      checks.push(
        behind.length
          ? { name: "streams", status: "fail", why: `${behind.length} of ${mine.length} copies not current: ${behind.slice(0, 4).map(({ s, r }) => `${s.name} ${r.lag} operations behind${r.activeS !== null ? `, last heard ${r.activeS} s ago` : ""} (leader ${s.leader})`).join("; ")}` }
          : { name: "streams", status: "ok", why: `${mine.length} replicated stream cop${mine.length === 1 ? "y" : "ies"} current${led ? `, leads ${led}` : ""}` },
      );
    }
    return {
      name: m.name,
      answers: m.answers,
      checks,
      details: { url: m.look.url, version: str(m.varz.version) ?? null, uptime: str(m.varz.uptime) ?? null, connections: num(m.varz.connections) ?? null, meta_leader: leaderView?.name ?? null, ...(myStuck.length ? { stuck: myStuck.map(({ stream, leader, seq, leaderSeq, since, forS }) => ({ stream, leader, seq, leader_seq: leaderSeq, since: new Date(since).toISOString(), for_s: forS })) } : {}), streams: mine.map((s) => ({ name: s.name, leader: s.leader, ...(s.leader === m.name ? {} : { current: s.replicas.find((r) => r.name === m.name)?.current ?? null, lag: s.replicas.find((r) => r.name === m.name)?.lag ?? null }) })) },
    };
  });
}
