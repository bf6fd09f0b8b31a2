import { Command } from "commander";

/** Hidden `muster lab receiver`: the lab's admin webhook endpoint, as its own process. */
export function receiverCommand(): Command {
  return new Command("receiver")
    .description("(lab internal) receive notification webhooks into a JSON-lines file")
    .requiredOption("--file <path>", "append each notification here")
    .option("--host <addr>", "loopback address", "127.0.0.1")
    .option("--port <n>", "port (0: any free)", "0")
    .action(async (o: { file: string; host: string; port: string }) => {
      const { startWebhookReceiver } = await import("./receivers.js"); // fastify: not for `muster lab --help`
      const r = await startWebhookReceiver({ host: o.host, port: Number(o.port), file: o.file });
      // Handlers before the ready line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`receiver listening on ${r.url}: ready\n`);
      await stopping;
      await r.close();
    });
}
