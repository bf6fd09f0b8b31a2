// Helpers for the console's tests: a reader of server-sent events over fetch, and request helpers.

export interface SseEvent {
  event: string;
  data: unknown;
  at: number;
}

export interface SseReader {
  events: SseEvent[];
  /** Resolves with the first event (from the start of the stream) matching, or rejects at the deadline. */
  next(pred: (e: SseEvent) => boolean, timeoutMs: number, what: string): Promise<SseEvent>;
  close(): void;
}

export async function openSse(url: string, headers: Record<string, string>): Promise<SseReader> {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  if (res.status !== 200) throw new Error(`SSE ${url}: HTTP ${res.status} ${await res.text()}`);
  const events: SseEvent[] = [];
  const waiters = new Set<() => void>();
  let buf = "";
  void (async () => {
    const dec = new TextDecoder();
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += dec.decode(chunk, { stream: true });
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = "message";
          const data: string[] = [];
          for (const line of frame.split("\n")) {
            if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (data.length) events.push({ event, data: JSON.parse(data.join("\n")), at: performance.now() });
          for (const w of waiters) w();
        }
      }
    } catch {
      // aborted
    }
  })();
  return {
    events,
    next(pred, timeoutMs, what) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const e = events.find(pred);
          if (e) {
            done();
            resolve(e);
          }
        };
        const t = setTimeout(() => {
          done();
          reject(new Error(`no SSE event ${what} within ${timeoutMs} ms; got: ${events.map((e) => e.event).join(", ")}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(t);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    close: () => ac.abort(),
  };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
