import { Command } from "commander";
import { MusterError } from "../../errors.js";

// `muster broker users --spec FILE`: nats-server's users and permissions for a muster fleet, from
// a short description of who connects (the same generator `muster lab up` uses).

export function brokerCommand(): Command {
  const broker = new Command("broker").description("nats-server configuration for a muster fleet (users and permissions)");
  broker.addCommand(
    new Command("users")
      .description("Print nats-server's authorization block: one user per credential, with what it may subscribe and publish")
      .requiredOption("--spec <file>", "who connects (YAML): collectives, provisioning_collective, nodes, bootstrap, provisioners, admins, registries")
      .option("--json", "print the users as JSON instead of nats-server config")
      .addHelpText(
        "after",
        `
Users are named as nats-server's verify_and_map names a client certificate: its subject in RFC 2253
form. A node's Puppet certificate is "CN=<certname>" (the default for each node); give services a
subject with OU and O (e.g. "CN=provisioner,OU=service,O=example"), which the Puppet CA never issues.

Example spec:
  collectives: [muster]
  provisioning_collective: provisioning
  nodes:
    - identity: web1.example.com        # user CN=web1.example.com
  bootstrap:
    - user: "CN=bootstrap,OU=service,O=example"   # shared by images not yet provisioned
  provisioners: ["CN=provisioner,OU=service,O=example"]
  admins: ["CN=ops,OU=service,O=example"]

Put the output in nats-server.conf next to a tls block with verify_and_map: true, and reload
nats-server (nats-server --signal reload) when nodes are added. See docs/security.md.`,
      )
      .action(async (o: { spec: string; json?: boolean }) => {
        const [{ authorizationConfig, brokerUsers, BrokerAuthSpecSchema }, { loadConfigFile }] = await Promise.all([import("../../broker/auth.js"), import("../../config/load.js")]);
        const spec = loadConfigFile(o.spec, BrokerAuthSpecSchema, "broker spec");
        try {
          process.stdout.write(o.json ? `${JSON.stringify(brokerUsers(spec), null, 2)}\n` : authorizationConfig(spec));
        } catch (e) {
          throw new MusterError("MUSTER_CONFIG_INVALID", `broker spec ${o.spec}: ${(e as Error).message}`);
        }
      }),
  );
  return broker;
}
