import type { Logger } from "pino";
import type { Buckets } from "../broker/bucket.js";
import { brokerVerdicts, stuckCopies, type CopyMark, type MemberLook } from "./brokers.js";
import { ServiceWriter } from "../beacon.js";

// The console watching the brokers (brokers.ts decides): every `intervalS` seconds it asks each
// member's monitoring port for /varz, /routez and /jsz (streams included), and writes each
// member's verdict to the services bucket as that broker's beat, signed by nobody but stored
// under the broker's key with the console named as its observer. Readers (`muster health`, every
// console) then see the brokers as the watching console saw them, and see when it stopped looking.

/** How long one member may take to answer one look. */
const LOOK_TIMEOUT_MS = 3000;
const MAX_BODY = 8 * 1024 * 1024;

async function getJson(url: string): Promise<unknown> {
  const r = await fetch(url, { signal: AbortSignal.timeout(LOOK_TIMEOUT_MS) });
  if (!r.ok) throw new Error(`HTTP ${r.status} from ${url}`);
  const text = await r.text();
  if (text.length > MAX_BODY) throw new Error(`${url} answered more than ${MAX_BODY} bytes`);
  return JSON.parse(text) as unknown;
}

/** What one member answers now. */
export async function lookAtMember(url: string, knownName?: string): Promise<MemberLook> {
  const base = url.replace(/\/+$/, "");
  try {
    const [varz, routez, jsz] = await Promise.all([getJson(`${base}/varz`), getJson(`${base}/routez`), getJson(`${base}/jsz?accounts=true&streams=true`).catch(() => undefined)]);
    return { url, ...(knownName ? { knownName } : {}), varz, routez, jsz };
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    return { url, ...(knownName ? { knownName } : {}), error: err.name === "TimeoutError" ? `no answer within ${LOOK_TIMEOUT_MS / 1000} s` : (err.cause?.code ?? err.cause?.message ?? err.message) };
  }
}

export class BrokerWatch {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly names = new Map<string, string>();
  /** Copies seen apart from their leader's, kept from look to look (stuckCopies). */
  private marks = new Map<string, CopyMark>();
  private readonly writer: ServiceWriter;

  constructor(
    buckets: Buckets,
    private readonly o: { urls: string[]; observer: string; version: string; intervalS?: number; log: Logger },
  ) {
    this.writer = new ServiceWriter(buckets, o.log);
  }

  start(): void {
    if (this.o.urls.length === 0) return;
    const tick = () => {
      if (this.stopped) return;
      void this.once().finally(() => {
        if (!this.stopped) this.timer = setTimeout(tick, (this.o.intervalS ?? 5) * 1000);
        this.timer?.unref();
      });
    };
    tick();
  }

  /** One look at every member, written. */
  async once(): Promise<void> {
    const looks = await Promise.all(this.o.urls.map((u) => lookAtMember(u, this.names.get(u))));
    const copies = stuckCopies(looks, Date.now(), this.marks);
    this.marks = copies.marks;
    const verdicts = brokerVerdicts(looks, copies.stuck);
    verdicts.forEach((v, i) => v.answers && this.names.set(this.o.urls[i]!, v.name));
    const time = Date.now();
    await Promise.all(verdicts.map((v) => this.writer.write({ name: v.name, role: "broker", time, interval: this.o.intervalS ?? 5, version: this.o.version, state: "up", observer: { name: this.o.observer, answers: v.answers }, checks: v.checks, details: v.details })));
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
