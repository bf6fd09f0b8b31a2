import { Command, InvalidArgumentError } from "commander";
import type { BrokerConnection, TlsSettings } from "../../broker/connect.js";
import type { MusterClient } from "../../client/client.js";
import type { SigningKey } from "../../protocol/signing.js";
import type { BrokerSettings, ClientConfig } from "../config.js";
import { addCommonOptions, type CommonOpts } from "../options.js";
import { existsSync } from "node:fs";
import { GUIDE, type Check } from "../doctor-site.js";
import { green, red, yellow } from "../style.js";

// `muster doctor`: why does nothing answer? Checks, in order, what a command needs: its config and
// broker, the TLS files and handshake, the connection, the signing key, a discovery, and whether
// nodes trust the key; on a site (a broker that maps each credential to a user), the steps of
// docs/deploy.md too (doctor-site.ts): the fleet's stores, replies verified against the key
// directory, each master's certificate carrying its identity, the brokers trusting the masters'
// Puppet CAs. Each check is ok, fail (with a fix) or skip (not applicable, or an earlier check
// failed). Exit 0 when nothing failed, 1 otherwise.
//
// Trust is the hard one: a node drops a broadcast signed by a key it does not trust without a word,
// so discovery alone cannot tell "untrusted" from "no nodes". A *direct* request does get an answer
// (status 1, "caller ... is not trusted by this node"), so nodes that did not answer discovery are
// asked directly: those named with -I, and those the registry knows (if one runs).

export type { Check, CheckState } from "../doctor-site.js";

interface DoctorOpts extends CommonOpts {
  identity?: string[];
  dt?: number;
}

/** Directly asked nodes at most: enough to tell, few enough to be quick. */
const MAX_PROBES = 10;

const collect = (v: string, prev: string[] = []) => [...prev, v];

function tlsText(t: TlsSettings | undefined): string {
  if (!t) return "none";
  return [t.ca && `ca ${t.ca}`, t.cert && `cert ${t.cert}`, t.key && `key ${t.key}`].filter(Boolean).join(", ");
}

const TLS_ERROR = /tls|ssl|certificate|self.signed|handshake|does not support 'tls'/i;

export async function runDoctor(o: DoctorOpts): Promise<Check[]> {
  // Loaded when the doctor runs, not for its --help (npm run bench:cli).
  const [{ checkTlsFiles, closeConnection, connectBroker }, { MusterClient }, { findClientConfig, loadClientConfig, resolveBrokerSettings }, { rpcutilDDL }, { Status }, { loadOrCreateSigningKey, signingKeyFile }] = await Promise.all([
    import("../../broker/connect.js"),
    import("../../client/client.js"),
    import("../config.js"),
    import("../../agents/rpcutil/ddl.js"),
    import("../../protocol/status.js"),
    import("../../security/keys.js"),
  ]);
  const checks: Check[] = [];
  const add = (c: Check) => (checks.push(c), c);
  const skipRest = (names: string[], why: string) => names.forEach((name) => add({ name, state: "skip", detail: why }));

  // 1. the client config and the broker it leads to
  let config: ClientConfig;
  let broker: BrokerSettings;
  const path = findClientConfig(o.config);
  try {
    config = loadClientConfig(o.config);
    broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
    add({ name: "config", state: "ok", detail: `${path ? `client config ${path}` : "no client config file (defaults)"}; broker ${broker.servers.join(", ")} (from ${broker.from}); collective ${o.target ?? config.collective}` });
  } catch (e) {
    add({ name: "config", state: "fail", detail: (e as Error).message, fix: "fix the file it names (keys: brokers, collective, tls, registry_bucket, ddl_directories, discovery_timeout), or point --config / MUSTER_CONFIG at a good one" });
    skipRest(["tls files", "signing key", "broker", "tls handshake", "discovery", "trust", ...SITE_CHECKS], "the config did not load");
    return checks;
  }
  const collective = o.target ?? config.collective;

  // 2. TLS files
  let tlsOk = true;
  if (!broker.tls) add({ name: "tls files", state: "skip", detail: "no TLS configured (tls: in the client config, or MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY)" });
  else {
    try {
      checkTlsFiles(broker.tls);
      add({ name: "tls files", state: "ok", detail: `readable: ${tlsText(broker.tls)}` });
    } catch (e) {
      tlsOk = false;
      add({ name: "tls files", state: "fail", detail: (e as Error).message, fix: "check the paths and permissions in the tls section (docs/security.md#tls)" });
    }
  }


  // 3. the signing key
  let key: SigningKey | undefined;
  let keyMadeNow = false;
  let keyCheck: Check | undefined;
  try {
    keyMadeNow = !existsSync(signingKeyFile());
    key = loadOrCreateSigningKey();
    keyCheck = add({ name: "signing key", state: "ok", detail: `caller ${key.name}, key ${signingKeyFile(key.name)}, public key ${key.publicKey}${keyMadeNow ? " (made now)" : ""}` });
  } catch (e) {
    add({ name: "signing key", state: "fail", detail: (e as Error).message, fix: "check the permissions of the keys directory, or set MUSTER_CONFIG_DIR" });
  }

  // How replies will be verified: libsodium, or OpenSSL when the addon did not load (slower, still whole).
  const ed25519 = await import("../../protocol/ed25519.js");
  const ed = ed25519.fastest().name; // sets ed25519.libsodiumError when the addon does not load
  add({ name: "ed25519", state: "ok", detail: ed === "libsodium" ? "libsodium (sodium-native) signs and verifies node signatures" : `OpenSSL, because libsodium did not load (${ed25519.libsodiumError}): every reply is still verified, large calls at about half the speed` });

  // 4. the connection, and with it the TLS handshake
  if (!tlsOk) {
    skipRest(["broker", "tls handshake", "discovery", "trust", ...SITE_CHECKS], "the TLS files are not readable");
    return checks;
  }
  let nc: BrokerConnection;
  try {
    nc = await connectBroker({ servers: broker.servers, from: broker.from, name: "muster-doctor", tls: broker.tls, timeoutMs: 5000 });
  } catch (e) {
    const msg = (e as Error).message;
    const cause = ((e as Error).cause as Error | undefined)?.message ?? msg;
    add({ name: "broker", state: "fail", detail: msg, fix: "start the broker or name the right one: --broker URL, MUSTER_BROKER, brokers: in the client config" });
    if (broker.tls && TLS_ERROR.test(cause)) add({ name: "tls handshake", state: "fail", detail: cause, fix: broker.tls.ca ? `check that ${broker.tls.ca} signed the broker's certificate, and that the broker accepts this client certificate` : "set tls.ca to the broker's CA" });
    else add({ name: "tls handshake", state: "skip", detail: broker.tls ? "no connection to test it on" : "no TLS configured" });
    skipRest(["discovery", "trust", ...SITE_CHECKS], "no broker connection");
    return checks;
  }
  // a site's brokers map each credential to a user (they ask for authentication): then the site's
  // own steps are checked too
  const site = nc.info?.auth_required === true;
  // on a site, a key made just now is one no machine was told to obey
  if (site && keyMadeNow && key && keyCheck)
    Object.assign(keyCheck, {
      state: "fail",
      detail: `there was no signing key for caller ${key.name}: made one now (${keyCheck.detail.replace(/ \(made now\)$/, "")}); no machine of the site names it`,
      fix: `machines obey the callers their user-data names: render them with --trusted-key "$(muster key show)" run as this user (or run muster as the user they name: your commands sign as user=<login>, or $MUSTER_CALLER) (${GUIDE.credentials})`,
    });
  try {
    add({ name: "broker", state: "ok", detail: `connected to ${nc.getServer()}${nc.info?.version ? ` (nats-server ${nc.info.version})` : ""}` });
    add(broker.tls ? { name: "tls handshake", state: "ok", detail: `the broker's certificate verified${broker.tls.cert ? ", our client certificate accepted" : ""}` } : { name: "tls handshake", state: "skip", detail: "no TLS configured" });
    if (!key) {
      skipRest(["discovery", "trust", ...SITE_CHECKS], "no signing key");
      return checks;
    }

    // 5. discovery (signed: only nodes that trust the key answer it)
    const client = await MusterClient.connect({ nc, key, collective });
    const discovered = await client.discover({ timeoutMs: (o.dt ?? config.discovery_timeout ?? 2) * 1000 });
    if (discovered.length) add({ name: "discovery", state: "ok", detail: `${discovered.length} node${discovered.length === 1 ? "" : "s"} answered in collective ${collective}: ${discovered.slice(0, 5).join(", ")}${discovered.length > 5 ? ", ..." : ""}` });
    else add({ name: "discovery", state: "fail", detail: `no node answered a discovery in collective ${collective}`, fix: "no node runs in this collective on this broker, or none trusts this key: see the trust check" });

    // 6. trust: ask directly the nodes that kept quiet
    const named = o.identity ?? [];
    const registered = await registryIdentities(client, config);
    const quiet = [...new Set([...named, ...registered])].filter((id) => !discovered.includes(id)).slice(0, MAX_PROBES);
    const pub = signingKeyFile(key.name).replace(/\.pem$/, ".pub");
    const trustFix = site
      ? `the machines obey the callers their user-data names: render them with --trusted-key "$(muster key show)" (prints ${key.name}=...), or add ${pub} to each one's security.trusted_keys and restart it (${GUIDE.credentials})`
      : `copy ${pub} to each node's security.trusted_keys_dir as ${key.name}.pub (or list it in security.trusted_keys) and restart it (docs/security.md#keys-and-the-trust-store)`;
    let untrusted: string[] = [];
    let silent: string[] = [];
    if (quiet.length) {
      const res = await client.call("rpcutil", "ping", {}, { nodes: quiet, ddl: rpcutilDDL, timeoutMs: 3000 });
      untrusted = res.replies.filter((r) => r.statuscode === Status.Aborted && /not trusted/i.test(r.statusmsg)).map((r) => r.sender).sort();
      silent = res.stats.noResponse.slice().sort();
    }
    const asked = quiet.length ? ` (asked directly: ${quiet.join(", ")}${registered.length ? "; from -I and the registry" : ""})` : "";
    if (untrusted.length) add({ name: "trust", state: "fail", detail: `${untrusted.join(", ")} refuse${untrusted.length === 1 ? "s" : ""} requests signed by caller ${key.name}: "not trusted by this node"${discovered.length ? `; ${discovered.length} other node(s) trust it` : ""}${silent.length ? `; no answer at all from ${silent.join(", ")}` : ""}`, fix: trustFix });
    else if (discovered.length) add({ name: "trust", state: "ok", detail: `the ${discovered.length} node(s) that answered discovery trust caller ${key.name} (it is signed)${silent.length ? `; no answer at all from ${silent.join(", ")} (down, or on another broker or collective)` : ""}${asked}` });
    else if (silent.length) add({ name: "trust", state: "fail", detail: `no answer from ${silent.join(", ")} even when asked directly`, fix: `those nodes are down, not in collective ${collective}, or on another broker; check \`muster server\` runs there and its brokers` });
    else
      add({
        name: "trust",
        state: "fail",
        detail: "cannot tell: no node answered discovery and there is no node to ask directly (a node drops a broadcast from an untrusted key without a word)",
        fix: `name a node you expect with -I IDENTITY: a direct request is answered even when the key is untrusted. If it should trust this key: ${trustFix}`,
      });
    // 7. the site's own steps (docs/deploy.md), each failure naming the section that does it
    if (site) {
      const { mastersCheck, puppetCaCheck, storesCheck, verifiedCheck } = await import("../doctor-site.js");
      add(await storesCheck(client));
      add(await verifiedCheck(client, discovered));
      add(await mastersCheck(client, (o.dt ?? config.discovery_timeout ?? 2) * 1000));
      add(await puppetCaCheck(client, discovered, config.provision_bucket as string | undefined));
    } else skipRest(SITE_CHECKS, "not a site: the broker asks for no credential (a site's maps each to a user), so no site's steps to check");
    await client.close();
  } finally {
    await closeConnection(nc);
  }
  return checks;
}

/** The checks of a site built by hand (doctor-site.ts). */
const SITE_CHECKS = ["stores", "replies verified", "masters", "puppet CAs"];

/** Identities the registry knows in the client's collective, if a registry bucket exists (else none). */
async function registryIdentities(client: MusterClient, config: ClientConfig): Promise<string[]> {
  try {
    const { emptyFilter } = await import("../../protocol/types.js");
    const records = await (await client.registry({ bucket: config.registry_bucket })).records(emptyFilter(), 3000);
    return records.map((r) => r.identity).sort();
  } catch {
    return []; // no registry here: only -I names nodes to ask
  }
}

export function renderChecks(checks: Check[]): string {
  const mark = { ok: green("ok  "), fail: red("FAIL"), skip: yellow("skip") };
  const w = Math.max(...checks.map((c) => c.name.length));
  const lines: string[] = [];
  for (const c of checks) {
    lines.push(`${mark[c.state]}  ${c.name.padEnd(w)}  ${c.detail.replace(/\s*\n\s*/g, " ")}`);
    if (c.fix && c.state === "fail") lines.push(`      ${" ".repeat(w)}  fix: ${c.fix}`);
  }
  const failed = checks.filter((c) => c.state === "fail").length;
  lines.push("", failed ? `${failed} check${failed === 1 ? "" : "s"} failed` : "all checks passed");
  return lines.join("\n");
}

export function doctorCommand(): Command {
  return addCommonOptions(new Command("doctor"))
    .description("Check what commands need: config and broker, TLS files and handshake, connection, signing key, discovery, and whether nodes trust the key")
    .option("-I, --identity <identity>", "a node to ask directly when it does not answer discovery (repeatable); the registry's nodes are asked too", collect)
    .option("--dt <seconds>", "discovery timeout", (v) => {
      const n = Number(v);
      if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError("--dt takes a positive number.");
      return n;
    })
    .addHelpText(
      "after",
      `
Each check prints ok, FAIL (with a fix) or skip. Exit 0 when none failed, 1 otherwise.

On a site (its brokers map each credential to a user: muster client setup names yours) it checks the
steps of docs/deploy.md too, each failure naming the section that does it: the fleet's stores
exist (muster broker stores), your key existed before (machines obey the callers their user-data
names), every reply verifies against the key directory (masters and the notifier enrolled), each
master's CA answers on a certificate for its identity, and nodes on their Puppet certificates reach
the brokers (each master's Puppet CA in their clients-ca.pem).

Nodes drop broadcasts signed by a key they do not trust without answering, so an untrusted key
looks like an empty fleet. A direct request is answered ("not trusted by this node"), so nodes
that stay quiet are asked directly: those named with -I and those the registry knows. Without
either, doctor can only say that nothing answered. See docs/security.md#when-nothing-answers-an-untrusted-key-and-muster-doctor.

Examples:
  muster doctor
  muster doctor -I web1.example.net --json`,
    )
    .action(async (o: DoctorOpts) => {
      const checks = await runDoctor(o);
      process.stdout.write(o.json ? `${JSON.stringify({ ok: checks.every((c) => c.state !== "fail"), checks }, null, 2)}\n` : `${renderChecks(checks)}\n`);
      process.exitCode = checks.some((c) => c.state === "fail") ? 1 : 0;
    });
}
