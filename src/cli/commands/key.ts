import { Command } from "commander";
import { join } from "node:path";

// `muster key create NAME`: a signing key made on the operator's workstation, for a service whose
// public half nodes must trust before it first runs (the provisioners share one: docs/deploy.md#2-credentials).

export function keyCommand(): Command {
  const key = new Command("key").description("Signing keys: make one for a service (the provisioners' shared key) before rendering the machines that trust it");
  key.addCommand(
    new Command("create")
      .description("Make a new ed25519 signing key: <dir>/<name>.pem (0600) and <name>.pub; prints the public key")
      .argument("<name>", "the caller name its requests are signed as (provisioner, console, user=ops)")
      .option("--dir <dir>", "where to write it (default: your muster config dir's keys/, where commands look for yours)")
      .addHelpText(
        "after",
        `
It never replaces a key: machines that trust the old one would refuse every request signed with
the new. The .pub is what nodes trust: --provisioner-key "$(cat provisioner.pub)" or
--trusted-key "NAME=$(cat NAME.pub)" when rendering their user-data (muster user-data).

Example:
  muster key create provisioner --dir keys/     keys/provisioner.pem, keys/provisioner.pub`,
      )
      .action(async (name: string, o: { dir?: string }) => {
        const { configDir, createSigningKey } = await import("../../security/keys.js");
        const made = createSigningKey(name, o.dir ?? join(configDir(), "keys"));
        process.stderr.write(`created ${made.file} and ${made.pub}\n`);
        process.stdout.write(`${made.key.publicKey}\n`);
      }),
  );
  return key;
}
