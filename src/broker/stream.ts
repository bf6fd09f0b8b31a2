import type { NatsConnection } from "@nats-io/transport-node";

// JetStream streams muster publishes to (the audit trail): found or created here, in broker/, and
// handed out as a small publisher, so the code that writes records knows no JetStream API.

export interface StreamSettings {
  name: string;
  subjects: string[];
  /** Seconds a message is kept (0 or absent: for ever). */
  maxAgeS?: number;
  /** Copies in a JetStream cluster; applies when the stream is made (an existing one keeps its own). */
  replicas?: number;
}

export interface StreamPublisher {
  /** Resolves once the stream acknowledged the message; `msgId` deduplicates a repeat. */
  publish(subject: string, data: string | Uint8Array, opts: { msgId: string; timeoutMs: number }): Promise<void>;
}

/** Who opens streams (a daemon's connection). */
export interface Streams {
  /** The stream, created when missing (`created` says so). */
  stream(s: StreamSettings): Promise<{ publisher: StreamPublisher; created: boolean }>;
  /**
   * The last `limit` messages of a stream as text, oldest first, up to its last message as it was
   * when asked; undefined when the stream does not exist (the audit page reads the nodes' trail).
   */
  tail(name: string, limit: number, timeoutMs: number): Promise<string[] | undefined>;
}

export function streamsOn(nc: NatsConnection): Streams {
  return {
    async stream(s) {
      const { jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError } = await import("@nats-io/jetstream");
      const jsm = await jetstreamManager(nc);
      let created = false;
      try {
        await jsm.streams.info(s.name);
      } catch (e) {
        if (!(e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound)) throw e;
        await jsm.streams.add({ name: s.name, subjects: s.subjects, ...(s.maxAgeS ? { max_age: Math.round(s.maxAgeS * 1e9) } : {}), ...(s.replicas ? { num_replicas: s.replicas } : {}) });
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
  };
}
