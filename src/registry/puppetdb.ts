import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { MusterError } from "../errors.js";
import { FilterError, validateWireFilter } from "../filter/index.js";
import { isValidCollective, isValidIdentity, subjects } from "../protocol/subjects.js";
import { MAX_PUPPETDB_REQUEST_BYTES, type PuppetDbErrorReply } from "../protocol/puppetdb.js";
import { discoverInPuppetDb } from "../puppetdb/discover.js";
import type { PuppetDb } from "../puppetdb/http.js";
import { MAX_RUNS, readNodeStatuses, readRuns } from "../puppetdb/runs.js";

// The registry as PuppetDB's door for muster's clients: `muster.registry.<bucket>.puppetdb`
// (protocol/puppetdb.ts). The registry holds PuppetDB's address and a credential PuppetDB trusts;
// the CLI and the console ask over the broker, so no operator needs PuppetDB's port or a
// certificate of its CA. Requests are untrusted: the filter goes through validateWireFilter as a
// node's request would, and only the fixed operations below are done (nothing is written to
// PuppetDB through here): discover, the active nodes' latest reports (health), a node's last runs.

const enc = new TextEncoder();
const dec = new TextDecoder();

function bad(error: string): PuppetDbErrorReply {
  return { error, code: "bad_request" };
}

/** One request's answer (PuppetDB asked through `db`). */
export async function answerPuppetDb(db: PuppetDb, data: Uint8Array): Promise<unknown> {
  if (data.length > MAX_PUPPETDB_REQUEST_BYTES) return bad(`request of ${data.length} bytes; the limit is ${MAX_PUPPETDB_REQUEST_BYTES}`);
  let req: Record<string, unknown>;
  try {
    req = JSON.parse(dec.decode(data)) as Record<string, unknown>;
  } catch {
    return bad("request is not JSON");
  }
  if (req === null || typeof req !== "object" || Array.isArray(req)) return bad("request is not an object");
  try {
    switch (req.op) {
      case "discover": {
        if (req.collective !== undefined && (typeof req.collective !== "string" || !isValidCollective(req.collective))) return bad("collective must be a collective name");
        const filter = validateWireFilter(req.filter);
        const r = await discoverInPuppetDb(db, filter, { collective: req.collective as string | undefined });
        return { identities: r.identities, warnings: r.warnings, puppetdb: db.url };
      }
      case "nodes": {
        const offset = req.offset ?? 0;
        if (typeof offset !== "number" || !Number.isInteger(offset) || offset < 0 || offset > 10_000_000) return bad("offset must be a whole number");
        const page = await readNodeStatuses(db, offset);
        return { nodes: page.nodes, more: page.more, next: page.next, puppetdb: db.url };
      }
      case "runs": {
        const limit = req.limit ?? 5;
        if (typeof req.certname !== "string" || !isValidIdentity(req.certname)) return bad("certname must be a node's identity");
        if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_RUNS) return bad(`limit must be a whole number from 1 to ${MAX_RUNS}`);
        return { runs: await readRuns(db, req.certname, limit), puppetdb: db.url };
      }
      default:
        return bad(`unknown op ${JSON.stringify(String(req.op).slice(0, 40))}; known: discover, nodes, runs`);
    }
  } catch (e) {
    if (e instanceof FilterError || e instanceof MusterError) return { error: e.message, code: e.code };
    throw e;
  }
}

/** Serve the subject (only a registry with PuppetDB does: a client that gets no answer says what to configure). */
export function servePuppetDb(nc: NatsConnection, bucket: string, db: PuppetDb, log: Logger): Subscription {
  return nc.subscribe(subjects.registryPuppetDb(bucket), {
    queue: `muster-registry-${bucket}`,
    callback: (err, msg) => {
      if (err || !msg.reply) return;
      const respond = (reply: unknown) => {
        let bytes = enc.encode(JSON.stringify(reply));
        if (bytes.length > nc.info!.max_payload) bytes = enc.encode(JSON.stringify({ error: `the answer is ${bytes.length} bytes, more than the broker's max_payload; narrow the filter`, code: "too_large" }));
        try {
          msg.respond(bytes);
        } catch (e) {
          log.warn({ err: (e as Error).message }, "cannot answer a PuppetDB request");
        }
      };
      answerPuppetDb(db, msg.data).then(respond, (e: unknown) => {
        log.error({ err: (e as Error).message }, "unexpected error answering a PuppetDB request");
        respond({ error: "internal error", code: "bad_request" });
      });
    },
  });
}
