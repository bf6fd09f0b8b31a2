import { Command } from "commander";
import type { Filter } from "../../protocol/types.js";
import { addFilterOptions, openSession, type FilterOpts } from "../options.js";

const isEmptyFilter = (f: Filter) => Object.values(f).every((v) => v.length === 0);

export function findCommand(): Command {
  return addFilterOptions(new Command("find"))
    .description("Print the identities of the nodes matching the filters, sorted, one per line")
    .addHelpText("after", "\nExamples:\n  muster find -F country=de\n  muster find -S \"web and not country=us\" --json\n\nExit code 1 when nothing matches.")
    .action(async (o: FilterOpts) => {
      const s = await openSession(o);
      try {
        // A broadcast expects the nodes the same question found last time (discovery-memory.ts).
        const memory = s.source ? undefined : (await import("../discovery-memory.js")).discoveryMemory({ servers: s.broker.servers, collective: s.client.collective, filter: s.filter });
        const nodes = await s.client.discover({ filter: s.filter, source: s.source, timeoutMs: s.discoveryTimeoutMs, anticipate: memory?.anticipate });
        memory?.remember(nodes);
        process.stdout.write(o.json ? `${JSON.stringify(nodes)}\n` : nodes.map((n) => `${n}\n`).join(""));
        // With filters, nothing found is an ordinary answer; with none, nothing answered at all.
        if (!nodes.length && !s.source && isEmptyFilter(s.filter)) process.stderr.write(`${(await import("../output.js")).noReplyHint(s.client.key)}\n`);
        process.exitCode = nodes.length ? 0 : 1;
      } finally {
        await s.client.close();
      }
    });
}
