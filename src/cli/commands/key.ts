import { Command } from "commander";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../../errors.js";

// `muster key create NAME`: a signing key made on the operator's workstation, for a service whose
// public half nodes must trust before it first runs (the provisioners share one), or for a site
// machine's muster server (a master, the notifier) whose key the directory must name before it
// answers (docs/deploy.md#2-credentials). `muster key show`: a key's public half as the machines are
// told to trust it. `muster key enroll`: a machine's key into the node-key directory, so its replies
// verify (an admin's credential).

export function keyCommand(): Command {
  const key = new Command("key").description("Signing keys: make one for a service (the provisioners' shared key) before rendering the machines that trust it");
  key.addCommand(
    new Command("create")
      .description("Make a new ed25519 signing key: <dir>/<name>.pem (0600) and <name>.pub; prints the public key")
      .argument("<name>", "the caller name its requests are signed as (provisioner, console, user=ops), or a site machine's identity for its node key")
      .option("--dir <dir>", "where to write it (default: your muster config dir's keys/, where commands look for yours)")
      .addHelpText(
        "after",
        `
It never replaces a key: machines that trust the old one would refuse every request signed with
the new. The .pub is what nodes trust: --provisioner-key "$(cat provisioner.pub)" or
--trusted-key "NAME=$(cat NAME.pub)" when rendering their user-data (muster user-data).

A master's or the notifier's muster server signs its replies with a node key: make it here, under
the machine's identity, give it to the machine (muster user-data --node-key) and enroll its public
half (muster key enroll), so the key directory names it before the machine first answers.

Examples:
  muster key create provisioner --dir keys/     keys/provisioner.pem, keys/provisioner.pub
  muster key create puppet-eu.example.net --dir keys/`,
      )
      .action(async (name: string, o: { dir?: string }) => {
        const { configDir, createSigningKey } = await import("../../security/keys.js");
        const made = createSigningKey(name, o.dir ?? join(configDir(), "keys"));
        process.stderr.write(`created ${made.file} and ${made.pub}\n`);
        process.stdout.write(`${made.key.publicKey}\n`);
      }),
  );
  key.addCommand(
    new Command("show")
      .description("Print a signing key as machines are told to trust it: NAME=PUBLIC_KEY (default: yours, the key your commands sign with)")
      .argument("[name]", "the caller name (default: yours, $MUSTER_CALLER or user=<login>)")
      .option("--dir <dir>", "where the key is (default: your muster config dir's keys/)")
      .addHelpText(
        "after",
        `
Your commands sign as user=<login> (the user you run them as: root's are user=root), or as
$MUSTER_CALLER. Machines obey you once their user-data names that caller and its public key:
  muster user-data ... --trusted-key "$(muster key show)"
It makes no key: muster client setup (or any command run once) makes yours.

Examples:
  muster key show                          user=alice=<base64 public key>
  muster key show console --dir keys/      console=<base64 public key>`,
      )
      .action(async (name: string | undefined, o: { dir?: string }) => {
        const { configDir, defaultCallerName, signingKeyFile } = await import("../../security/keys.js");
        const caller = name ?? defaultCallerName();
        const pem = o.dir ? join(o.dir, `${caller.replace(/[^A-Za-z0-9_.=@-]/g, "_")}.pem`) : signingKeyFile(caller);
        const pub = pem.replace(/\.pem$/, ".pub");
        let text: string;
        try {
          text = readFileSync(pub, "utf8").trim();
        } catch {
          throw new MusterError("MUSTER_KEY_ERROR", `no signing key for caller ${caller} (${pub} does not exist): muster client setup makes yours, muster key create ${caller}${o.dir ? ` --dir ${o.dir}` : ""} a service's${o.dir || name ? "" : ` (looked in ${join(configDir(), "keys")})`}`);
        }
        process.stdout.write(`${caller}=${text}\n`);
      }),
  );
  key.addCommand(
    new Command("enroll")
      .description("Put a site machine's node key in the key directory, so its replies verify (a master, the notifier: machines no provisioner vouches for)")
      .argument("<identity>", "the machine's identity: the sender its replies carry")
      .requiredOption("--key <file>", "its public key: the .pub next to the key muster key create made")
      .option("--replace", "replace the key the directory names for it now (replies signed by the old one are dropped from then on)")
      .option("--broker <url>", "NATS broker URL(s), comma-separated (default: $MUSTER_BROKER, the client config)")
      .option("--config <file>", "client config file")
      .addHelpText(
        "after",
        `
Clients (muster rpc, the provisioner, the console) check each reply against the key the directory
names for its sender: a reply from a sender it does not know is shown (unverified), and the
provisioner refuses a master's unverified reply when master.require_verified is on. The
provisioner writes the entries of the nodes it provisions; the machines it does not provision are
enrolled here, with an admin's credential (the broker lets admins and provisioners write the
directory). See docs/deploy.md#2-credentials and docs/security.md#the-trust-model-who-vouches-for-a-node-key.

Example:
  muster key enroll puppet-eu.example.net --key keys/puppet-eu.example.net.pub`,
      )
      .action(async (identity: string, o: { key: string; replace?: boolean; broker?: string; config?: string }) => {
        const [{ MusterClient }, { loadClientConfig, resolveBrokerSettings }, { defaultCallerName }, { isValidIdentity }, { enrollNodeKey }] = await Promise.all([
          import("../../client/client.js"),
          import("../config.js"),
          import("../../security/keys.js"),
          import("../../protocol/subjects.js"),
          import("../../fleet/stores.js"),
        ]);
        if (!isValidIdentity(identity)) throw new MusterError("MUSTER_USAGE", `not a node identity: ${JSON.stringify(identity)} (letters, digits, - _ . : @)`);
        let pubkey: string;
        try {
          pubkey = readFileSync(o.key, "utf8").trim();
        } catch (e) {
          throw new MusterError("MUSTER_USAGE", `--key ${o.key}: ${(e as Error).message}`);
        }
        const cfg = loadClientConfig(o.config);
        const b = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
        const client = await MusterClient.connect({ brokers: b.servers, collective: cfg.collective, name: "muster-key-enroll", tls: b.tls, from: b.from });
        try {
          // the directory is made here if no provisioner made it yet (an admin may create streams)
          const plan = await enrollNodeKey(client, { identity, pubkey, by: defaultCallerName(), ...(o.replace ? { replace: true } : {}) });
          if (plan.act === "refuse") throw new MusterError("MUSTER_USAGE", plan.why);
          process.stdout.write(`${plan.why}\n`);
        } catch (e) {
          if (/permission|authoriz/i.test((e as Error).message)) throw new MusterError("MUSTER_BROKER_REFUSED", `the broker refused writing the key directory: enrolling needs an admin's credential (listed under admins: in the broker spec): ${(e as Error).message}`);
          throw e;
        } finally {
          await client.close();
        }
      }),
  );
  return key;
}
