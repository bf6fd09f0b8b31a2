import type { NatsConnection } from "@nats-io/transport-node";

// JetStream streams muster publishes to (the audit trail, runall history): found or created here,
// in broker/, and handed out as a small publisher and readers, so the code that writes and reads
// records knows no JetStream API.

export interface StreamSettings {
  name: string;
  subjects: string[];
  /** Seconds a message is kept (0 or absent: for ever). */
  maxAgeS?: number;
  /** Bytes the stream keeps at most (the oldest messages go first). */
  maxBytes?: number;
  /** Copies in a JetStream cluster; applies when the stream is made (an existing one keeps its own). */
  replicas?: number;
  /** false: only find it; a missing stream is an error rather than a create the credential may not make. */
  create?: boolean;
}

/** One stored message. */
export interface StreamMessage {
  seq: number;
  subject: string;
  data: Uint8Array;
  /** When the broker stored it, ms epoch. */
  time: number;
}

/** What following a stream delivers: every stored message, `caught-up` once, then each new one. */
export type StreamChange = { kind: "message"; message: StreamMessage } | { kind: "caught-up" };

export interface StreamFollow extends AsyncIterable<StreamChange> {
  stop(): void;
}

export interface StreamPublisher {
  /** Resolves once the stream acknowledged the message; `msgId` deduplicates a repeat. */
  publish(subject: string, data: string | Uint8Array, opts: { msgId: string; timeoutMs: number }): Promise<void>;
}

/** Who opens streams (a daemon's connection). */
export interface Streams {
  /** Whether the stream exists (nothing is made). */
  exists(name: string): Promise<boolean>;
  /** The stream, created when missing (`created` says so). */
  stream(s: StreamSettings): Promise<{ publisher: StreamPublisher; created: boolean }>;
  /**
   * The last `limit` messages of a stream as text, oldest first, up to its last message as it was
   * when asked; undefined when the stream does not exist (the audit page reads the nodes' trail).
   */
  tail(name: string, limit: number, timeoutMs: number): Promise<string[] | undefined>;
  /**
   * Every message from `fromSeq` (default the first) on, `caught-up` once the ones stored when
   * asked are delivered, then each new one as it is stored; undefined when there is no stream.
   */
  follow(name: string, opts?: { fromSeq?: number }): Promise<StreamFollow | undefined>;
}

export function streamsOn(nc: NatsConnection): Streams {
  return {
    async exists(name) {
      const { jetstreamManager, JetStreamApiCodes, JetStreamApiError } = await import("@nats-io/jetstream");
      try {
        await (await jetstreamManager(nc)).streams.info(name);
        return true;
      } catch (e) {
        if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) return false;
        throw e;
      }
    },
    async stream(s) {
      const { jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError } = await import("@nats-io/jetstream");
      const jsm = await jetstreamManager(nc);
      let created = false;
      try {
        await jsm.streams.info(s.name);
      } catch (e) {
        if (!(e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound)) throw e;
        if (s.create === false) throw new Error(`stream ${s.name} does not exist yet, and this connection does not create it (an admin does: the web console, or muster broker stores)`);
        await jsm.streams.add({ name: s.name, subjects: s.subjects, ...(s.maxAgeS ? { max_age: Math.round(s.maxAgeS * 1e9) } : {}), ...(s.maxBytes ? { max_bytes: s.maxBytes } : {}), ...(s.replicas ? { num_replicas: s.replicas } : {}) });
        created = true;
      }
      const js = jetstream(nc);
      return {
        created,
        publisher: {
          async publish(subject, data, o) {
            await js.publish(subject, data, { msgID: o.msgId, timeout: o.timeoutMs });
          },
        },
      };
    },
    async tail(name, limit, timeoutMs) {
      const { jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError, DeliverPolicy } = await import("@nats-io/jetstream");
      const jsm = await jetstreamManager(nc);
      let first: number;
      let last: number;
      try {
        const info = await jsm.streams.info(name);
        if (info.state.messages === 0) return [];
        [first, last] = [info.state.first_seq, info.state.last_seq];
      } catch (e) {
        if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) return undefined;
        throw e;
      }
      const start = Math.max(first, last - limit + 1);
      const consumer = await jetstream(nc).consumers.get(name, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start });
      const dec = new TextDecoder();
      const lines: string[] = [];
      for await (const m of await consumer.fetch({ max_messages: last - start + 1, expires: timeoutMs })) {
        lines.push(dec.decode(m.data));
        if (m.seq >= last) break;
      }
      return lines;
    },
    async follow(name, opts = {}) {
      const { jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError, DeliverPolicy } = await import("@nats-io/jetstream");
      let pending: number;
      try {
        const info = await (await jetstreamManager(nc)).streams.info(name);
        pending = info.state.last_seq >= (opts.fromSeq ?? 0) ? info.state.messages : 0;
      } catch (e) {
        if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) return undefined;
        throw e;
      }
      // An ordered consumer: stored messages in order, then new ones, recreated by the library after a hiccup.
      const consumer = await jetstream(nc).consumers.get(name, opts.fromSeq ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: opts.fromSeq } : {});
      const messages = await consumer.consume();
      async function* changes(): AsyncGenerator<StreamChange> {
        let caughtUp = pending === 0;
        try {
          if (caughtUp) yield { kind: "caught-up" };
          for await (const m of messages) {
            yield { kind: "message", message: { seq: m.seq, subject: m.subject, data: m.data, time: Math.round(Number(m.info.timestampNanos) / 1e6) } };
            if (!caughtUp && m.info.pending === 0) {
              caughtUp = true;
              yield { kind: "caught-up" };
            }
          }
        } finally {
          void messages.stop();
        }
      }
      const it = changes();
      return { [Symbol.asyncIterator]: () => it, stop: () => void messages.stop() };
    },
  };
}
