import { Command } from "commander";
import { MusterError } from "../../errors.js";

// `muster client setup`: an operator's workstation made ready in one command (docs/deploy.md#2-credentials):
// the client config naming the site's brokers and the operator's broker credential (copied next to
// it), and the operator's signing key, with the line that makes machines obey it.

const collect = (v: string, prev: string[] = []) => [...prev, v];


export function clientCommand(): Command {
  const client = new Command("client").description("This workstation as a client of a site: its client config, broker credential and signing key");
  client.addCommand(
    new Command("setup")
      .description("Write your client config (the brokers, your broker credential) and make your signing key; prints what machines must trust")
      .requiredOption("--broker <url>", "a broker of the site, tls://HOST:4222 (repeatable: list every member)", collect)
      .requiredOption("--ca <file>", "the CA that signed the brokers' certificates")
      .option("--cert <file>", "your broker credential's certificate (CN=<you>,OU=service,O=<org>: muster ca issue service NAME)")
      .option("--key <file>", "its key")
      .option("--collective <name>", "the fleet's collective", "muster")
      .option("--force", "replace a client config that exists")
      .addHelpText(
        "after",
        `
Writes, in your muster config dir (~/.config/muster, or $MUSTER_CONFIG_DIR):
  client.yaml                  brokers, collective, tls: {ca, cert, key}
  tls/ca.pem, client.pem, client.key (0600)   copies of the files given
  keys/<caller>.pem, .pub      your signing key, made unless you have one
Your commands sign as user=<login> (root's as user=root), or as $MUSTER_CALLER: run this as the
user you will run muster as. Machines obey you once their user-data names you:
  muster user-data ... --trusted-key "$(muster key show)"
Then check it all with muster doctor.

Example:
  muster client setup --broker tls://nats1.example.net:4222 --broker tls://nats2.example.net:4222 \\
    --broker tls://nats3.example.net:4222 --ca ca.pem --cert ops.pem --key ops.key`,
      )
      .action(async (o: import("../../config/client-setup.js").ClientSetup) => {
        const { setupClient } = await import("../../config/client-setup.js");
        if (!o.cert !== !o.key) throw new MusterError("MUSTER_USAGE", "--cert and --key go together: your broker credential's certificate and its key");
        const done = setupClient(o);
        process.stdout.write(`${done.join("\n")}\n`);
      }),
  );
  return client;
}
