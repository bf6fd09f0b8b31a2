import type { RpcResult } from "../client/client.js";
import type { AgentDDL } from "../ddl/types.js";
import { rpcExitCode } from "./exit.js";
import { openSession, type RpcOpts, type Session } from "./options.js";
import { limitFromOpts } from "./session.js";
import { aggregatesFor, defaultDisplay, noReplyHint, progressBar, rejectedLines, renderAggregates, renderReplies, renderSummary, resultJson } from "./output.js";

// The common path of every RPC command: filters, discovery, the call with a progress bar,
// then replies, aggregates, summary and MCollective's exit code.

export async function executeRpc(o: RpcOpts, agent: string, action: string, data: Record<string, unknown>, ddl: AgentDDL | undefined, render?: (r: RpcResult, s: Session) => string, opts: { aggregates?: boolean } = {}): Promise<RpcResult> {
  const limit = limitFromOpts(o);
  const s = await openSession(o);
  const bar = progressBar(!o.json && o.progress !== false);
  try {
    const result = await s.client.call(agent, action, data, {
      filter: s.filter,
      discovery: { source: s.source, timeoutMs: s.discoveryTimeoutMs, filter: s.filter },
      ddl,
      batch: o.batch,
      batchSleepMs: o.batchSleep ? o.batchSleep * 1000 : undefined,
      limit,
      timeoutMs: o.timeout ? o.timeout * 1000 : undefined,
      onDiscovered: (nodes) => bar.start(nodes.length),
      onReply: () => bar.tick(),
    });
    bar.stop();
    process.stderr.write(rejectedLines(result)); // dropped by verification: never shown as a reply
    const aggs = opts.aggregates === false ? [] : aggregatesFor(result, ddl);
    if (o.json) process.stdout.write(`${JSON.stringify(resultJson(result, aggs), null, 2)}\n`);
    else if (result.stats.discovered === 0) process.stderr.write(`No request sent, we did not discover any nodes.\n${s.source ? "" : `${noReplyHint(s.client.key)}\n`}`);
    else {
      const body = render ? render(result, s) : renderReplies(result, ddl, o.display ?? defaultDisplay(ddl, action));
      if (body.trim()) process.stdout.write(`${body.replace(/\n+$/, "")}\n\n`);
      if (aggs.length) process.stdout.write(`${renderAggregates(aggs)}\n\n`);
      process.stdout.write(`${renderSummary(result)}\n`);
    }
    const st = result.stats;
    process.exitCode = rpcExitCode(st.discovered, st.responded, st.failed, st.noResponse.length, !s.source || s.source.name !== "flatfile");
    return result;
  } finally {
    bar.stop();
    await s.client.close();
  }
}
