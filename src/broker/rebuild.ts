import type { NatsConnection } from "@nats-io/transport-node";
import { MusterError } from "../errors.js";
import { openTimedOut, retryTransient } from "./bucket.js";

// Rebuilding one cluster member's copies of the replicated streams (`muster broker stores
// --rebuild MEMBER`). nats-server 2.10 (Debian 13's) can leave a member that came back from a power
// cut with a copy of a compare-and-set bucket that never catches up: the leader sees it current
// while it stays at its old last sequence (the site's e2e saw KV_muster_provision at 44 of 84 for
// five minutes; nats-server issue 8319). Taking the member out of each stream and putting it back
// makes it copy the stream afresh. The plan is pure; the JetStream requests are at the bottom.

/** What rebuilding needs to know of a stream: its replicas wanted, and who holds a copy now. */
export interface StreamPeers {
  name: string;
  replicas: number;
  leader?: string;
  /** Every member holding a copy, the leader included. */
  peers: string[];
}

export type RebuildStep = { stream: string; action: "rebuild"; stepDown: boolean } | { stream: string; action: "skip"; why: string };

/** Per stream: rebuild the member's copy (first moving the leadership off it), or why not. */
export function planRebuild(streams: StreamPeers[], member: string): RebuildStep[] {
  return streams.map((s): RebuildStep => {
    if (!s.peers.includes(member)) return { stream: s.name, action: "skip", why: `${member} holds no copy` };
    if (s.replicas < 2) return { stream: s.name, action: "skip", why: "a single copy: nothing to rebuild it from" };
    if (s.peers.length < s.replicas) return { stream: s.name, action: "skip", why: `${s.peers.length} of ${s.replicas} copies placed: the cluster is short of a member` };
    if (!s.leader) return { stream: s.name, action: "skip", why: "no leader: the stream has no quorum now" };
    return { stream: s.name, action: "rebuild", stepDown: s.leader === member };
  });
}

/** Members named anywhere in these streams, sorted: what `--rebuild` may be given. */
export function membersOf(streams: StreamPeers[]): string[] {
  return [...new Set(streams.flatMap((s) => s.peers))].sort();
}

export interface RebuildResult {
  stream: string;
  outcome: "rebuilt" | "skipped";
  detail: string;
  ms?: number;
}

type Jsm = Awaited<ReturnType<typeof import("@nats-io/jetstream").jetstreamManager>>;

async function peersOf(jsm: Jsm, name: string): Promise<StreamPeers & { current: Map<string, boolean> }> {
  const info = await jsm.streams.info(name);
  const replicas = info.cluster?.replicas ?? [];
  const leader = info.cluster?.leader;
  return {
    name,
    replicas: info.config.num_replicas ?? 1,
    ...(leader ? { leader } : {}),
    peers: [...(leader ? [leader] : []), ...replicas.map((r) => r.name)],
    current: new Map(replicas.map((r) => [r.name, r.current && !r.offline])),
  };
}

/** The replicated streams of this account, with their members. */
export async function streamPeers(nc: NatsConnection): Promise<StreamPeers[]> {
  const { jetstreamManager } = await import("@nats-io/jetstream");
  const jsm = await jetstreamManager(nc);
  // names, then each one's own info: a paged listing can repeat or drop one while the cluster moves
  const names = new Set<string>();
  for await (const n of jsm.streams.names()) names.add(n);
  const out = await Promise.all([...names].map((n) => peersOf(jsm, n)));
  return out.filter((s) => s.replicas > 1).sort((a, b) => a.name.localeCompare(b.name));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined); // an election in between answers nothing
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `${what} did not happen within ${timeoutMs / 1000} s`);
    await sleep(250); // the cluster announces none of these to a client
  }
}

/**
 * Rebuilds `member`'s copy of the named streams (default: every replicated stream it holds a copy
 * of): leadership moved off it, the member taken out of the stream, the stream one copy short, then
 * back to its copies, which places the member again with an empty copy it fills from the others.
 * Writes go on throughout (the other copies keep a quorum).
 */
export async function rebuildMember(nc: NatsConnection, member: string, o: { streams?: string[]; timeoutMs?: number; progress?: (line: string) => void } = {}): Promise<RebuildResult[]> {
  const { jetstreamManager } = await import("@nats-io/jetstream");
  const timeoutMs = o.timeoutMs ?? 120_000;
  // the broker this connected to may be the member itself, just back and not serving JetStream yet
  const [jsm, all] = await retryTransient(async () => [await jetstreamManager(nc), await streamPeers(nc)] as const, 30_000, openTimedOut).catch((e: unknown) => {
    throw openTimedOut(e) ? new MusterError("MUSTER_TIMEOUT", `the brokers did not answer JetStream's requests within 30 s (${(e as Error).message}): is the cluster up, with a leader?`) : e;
  });
  const known = membersOf(all);
  if (!known.includes(member)) throw new MusterError("MUSTER_USAGE", `no replicated stream has a copy on ${JSON.stringify(member)}; the members are: ${known.join(", ") || "(none: no replicated streams)"}`);
  const chosen = o.streams?.length ? all.filter((s) => o.streams!.includes(s.name)) : all;
  const missing = (o.streams ?? []).filter((n) => !all.some((s) => s.name === n));
  if (missing.length) throw new MusterError("MUSTER_USAGE", `no replicated stream named ${missing.join(", ")}; they are: ${all.map((s) => s.name).join(", ")}`);
  const out: RebuildResult[] = [];
  for (const listed of chosen) {
    // as it is now, with a leader (one may be being elected as the member rejoins); none within
    // 30 s and the plan says so
    const now = await until(`${listed.name}: a leader`, 30_000, async () => {
      const p = await peersOf(jsm, listed.name);
      return p.leader ? p : undefined;
    }).catch(() => listed);
    const step = planRebuild([now], member)[0]!;
    if (step.action === "skip") {
      out.push({ stream: step.stream, outcome: "skipped", detail: step.why });
      continue;
    }
    const t0 = Date.now();
    const api = async (subject: string, body: unknown) => JSON.parse(new TextDecoder().decode((await nc.request(subject, JSON.stringify(body), { timeout: 10_000 })).data)) as { error?: { code: number; err_code?: number; description: string } };
    if (step.stepDown) {
      o.progress?.(`${step.stream}: moving its leadership off ${member}`);
      const r = await api(`$JS.API.STREAM.LEADER.STEPDOWN.${step.stream}`, {});
      if (r.error) throw new MusterError("MUSTER_BROKER_REFUSED", `${step.stream}: the leader did not step down: ${r.error.description}`);
      await until(`${step.stream}: a new leader`, timeoutMs, async () => {
        const p = await peersOf(jsm, step.stream);
        return p.leader && p.leader !== member ? true : undefined;
      });
    }
    o.progress?.(`${step.stream}: taking ${member}'s copy out`);
    const removed = await api(`$JS.API.STREAM.PEER.REMOVE.${step.stream}`, { peer: member });
    // 10075, "peer remap failed": no spare member to move the copy to; the member is out all the
    // same (the stream is one copy short until it goes back to its replicas below)
    if (removed.error && removed.error.err_code !== 10075) throw new MusterError("MUSTER_BROKER_REFUSED", `${step.stream}: ${member} was not taken out: ${removed.error.description}`);
    await until(`${step.stream}: ${member} out of the stream`, timeoutMs, async () => ((await peersOf(jsm, step.stream)).peers.includes(member) ? undefined : true));
    const { config } = await jsm.streams.info(step.stream);
    const replicas = config.num_replicas;
    o.progress?.(`${step.stream}: ${replicas - 1} copies, then ${replicas} again`);
    await jsm.streams.update(step.stream, { ...config, num_replicas: replicas - 1 });
    await jsm.streams.update(step.stream, { ...config, num_replicas: replicas });
    const back = await until(`${step.stream}: ${member}'s copy placed and current`, timeoutMs, async () => {
      const p = await peersOf(jsm, step.stream);
      return p.peers.length === replicas && [...p.current.values()].every(Boolean) ? p : undefined;
    });
    out.push({ stream: step.stream, outcome: "rebuilt", detail: `${back.peers.length} copies (${back.peers.join(", ")}), all current`, ms: Date.now() - t0 });
  }
  return out;
}
