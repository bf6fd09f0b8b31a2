import { Command } from "commander";
import { Status } from "../../protocol/status.js";
import { addFilterOptions, openSession, type FilterOpts } from "../options.js";

export function pingCommand(): Command {
  return addFilterOptions(new Command("ping"))
    .description("Broadcast a ping; every matching node answers with its round-trip time")
    .addHelpText("after", "\nExamples:\n  muster ping\n  muster ping -C apache --dt 5\n\nExit code 1 when no node answers.")
    .action(async (o: FilterOpts) => {
      const s = await openSession(o);
      try {
        const t0 = performance.now();
        const times: { node: string; ms: number }[] = [];
        await s.client.broadcastRequest("discovery", "ping", {}, s.filter, {
          timeoutMs: s.discoveryTimeoutMs,
          idleMs: 250,
          onReply: (r) => {
            if (r.statuscode !== Status.OK) return;
            const ms = performance.now() - t0;
            times.push({ node: r.sender, ms });
            if (!o.json) process.stdout.write(`${r.sender.padEnd(40)} time=${ms.toFixed(2)} ms\n`);
          },
        });
        if (o.json) process.stdout.write(`${JSON.stringify(times)}\n`);
        else {
          const ms = times.map((t) => t.ms);
          const stats = ms.length ? `min: ${Math.min(...ms).toFixed(3)}ms  max: ${Math.max(...ms).toFixed(3)}ms  avg: ${(ms.reduce((a, b) => a + b, 0) / ms.length).toFixed(3)}ms` : "";
          process.stdout.write(`\n---- ping statistics ----\n${times.length} replies ${stats}\n`);
        }
        if (!times.length && !o.json) process.stderr.write(`${(await import("../output.js")).noReplyHint(s.client.key)}\n`);
        process.exitCode = times.length ? 0 : 1;
      } finally {
        await s.client.close();
      }
    });
}
