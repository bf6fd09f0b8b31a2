import { Command } from "commander";
import { MusterError } from "../../errors.js";
import type { MusterClient } from "../../client/client.js";
import type { AlertBookView, DeliveryState } from "../../health/alert-book.js";
import type { AlertHistory } from "../../health/alert-history.js";
import type { AlertEvent } from "../../protocol/alert-event.js";
import { addCommonOptions, type CommonOpts } from "../options.js";
import { bold, green, red, yellow } from "../style.js";

// `muster alerts`: what the admins are told about the fleet's health (docs/fleet.md#alerts), from
// the alerts' history every console keeps (stream MUSTER_ALERTS): whether deliveries work, what is
// open, which nodes are silenced; acknowledge an alert, silence a node for a stated time, end a
// silence, send a test alert. Each action is kept in the history and in the audit stream.

interface AlertsOpts extends CommonOpts {
  history?: string;
}

interface Opened {
  client: MusterClient;
  history: AlertHistory;
  /** Keeps the CLI's own audit record of an action (the audit stream, `muster.audit.cli`); rejects when it could not. */
  audit(action: string, target: string, data: Record<string, unknown>, ok: boolean, outcome: string): Promise<void>;
}

async function open(o: CommonOpts): Promise<Opened> {
  // Loaded when a subcommand runs, not for --help (npm run bench:cli).
  const [{ MusterClient }, { AlertHistory }, { loadClientConfig, resolveBrokerSettings }, { AUDIT_STREAM }, audit, { randomUUID }, { hostname }] = await Promise.all([
    import("../../client/client.js"),
    import("../../health/alert-history.js"),
    import("../config.js"),
    import("../../fleet/stores.js"),
    import("../../security/audit.js"),
    import("node:crypto"),
    import("node:os"),
  ]);
  const cfg = loadClientConfig(o.config);
  const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
  const client = await MusterClient.connect({ brokers: broker.servers, collective: o.target ?? cfg.collective, name: "muster-alerts", tls: broker.tls, from: broker.from });
  try {
    const streams = await client.streams();
    const history = await AlertHistory.open(streams);
    return {
      client,
      history,
      async audit(action, target, data, ok, outcome) {
        const { publisher } = await streams.stream(AUDIT_STREAM);
        const e = audit.signAuditEntry({ time: Date.now(), identity: target, requestid: randomUUID(), caller: client.key.name, sender: hostname(), agent: audit.OPERATOR_AUDIT_AGENTS.cli, action, data, statuscode: ok ? 0 : 1, statusmsg: outcome }, client.key);
        await publisher.publish(audit.OPERATOR_AUDIT_SUBJECTS.cli, audit.auditLine(e), { msgId: `${e.identity}|${e.requestid}`, timeoutMs: 5000 });
      },
    };
  } catch (e) {
    await client.close();
    throw new MusterError("MUSTER_BROKER_REFUSED", `cannot open the alerts' history (stream MUSTER_ALERTS): ${(e as Error).message}. An admin's credential makes it (or the console does when it starts)`, { cause: e });
  }
}

/** Runs an action with the history open, closing the client after. */
async function withHistory<T>(o: CommonOpts, act: (h: Opened) => Promise<T>): Promise<T> {
  const h = await open(o);
  try {
    return await act(h);
  } finally {
    await h.client.close();
  }
}

const iso = (t: number | string) => new Date(t).toISOString().replace(/\.\d+Z$/, "Z");

function deliveryLine(d: DeliveryState | null): string {
  if (!d) return "Delivery: no alert has been sent yet";
  if (d.ok) return `Delivery: ${green("working")}; the last alert (${d.subject ?? "?"}) reached ${d.told.join(", ") || "its recipients"}${d.notifier ? ` through ${d.notifier}` : ""} at ${iso(d.at)}`;
  return `Delivery: ${red("FAILING")}${d.failing_since ? ` since ${iso(d.failing_since)}` : ""}: ${d.error ?? "not delivered"}`;
}

function eventLine(e: AlertEvent): string {
  const about = e.identity ? `${e.identity}${e.kind && e.kind !== "test" ? ` ${e.kind}` : ""}` : "the admins";
  let detail = "";
  if (e.type === "fired" || e.type === "resolved" || e.type === "test") detail = e.told?.length ? `told ${e.told.join(", ")}` : `nobody told${e.held ? `: ${e.held}` : ""}`;
  else if (e.type === "delivery_failed") detail = red(`${e.of ?? "alert"} not delivered: ${e.error ?? ""}`);
  else if (e.type === "silenced") detail = `until ${iso(e.until!)}${e.note ? `: ${e.note}` : ""}`;
  else if (e.type === "acknowledged") detail = e.note ?? "";
  return `  ${iso(e.time)}  ${e.type.padEnd(15)}  ${about}  ${detail}  (by ${e.by})`;
}

export function renderAlerts(v: AlertBookView): string {
  const lines = [deliveryLine(v.last_delivery), "", bold(`Open (${v.open.length})`)];
  for (const a of v.open) {
    const told = a.delivery === "told" ? `told ${a.told.join(", ")}` : a.delivery === "held" ? yellow(`nobody told: ${a.why ?? ""}`) : red(`not told yet: ${a.why ?? ""}`);
    lines.push(`  ${a.identity}  ${a.kind}  fired ${iso(a.fired)}  ${told}${a.acknowledged ? `  acknowledged by ${a.acknowledged.by} at ${iso(a.acknowledged.at)}${a.acknowledged.note ? `: ${a.acknowledged.note}` : ""}` : ""}`);
  }
  lines.push("", bold(`Silenced (${v.silences.length})`));
  for (const s of v.silences) lines.push(`  ${s.identity}  until ${iso(s.until)}, by ${s.by}${s.note ? `: ${s.note}` : ""}`);
  lines.push("", bold(`History (newest ${v.history.length})`));
  for (const e of v.history) lines.push(eventLine(e));
  return lines.join("\n");
}

export function alertsCommand(): Command {
  const cmd = addCommonOptions(new Command("alerts"))
    .description("The admins' alerts: whether they arrive, what is open, silenced nodes, history; acknowledge, silence, test")
    .option("--history <n>", "events of the history to list, newest first", "20")
    .addHelpText(
      "after",
      `
The console tells the admins when a node is unreachable or Puppet keeps failing, and again when
it recovers (docs/fleet.md#alerts). Every alert, every delivery that failed and every operator's
action is kept in the stream MUSTER_ALERTS (90 days), which this command reads.

Exit codes: 0, or 2 when the last delivery failed (the admins are not being told).

Examples:
  muster alerts                                        delivery, open alerts, silences, history
  muster alerts ack node05.eu.lab --note "on it"       someone is on it
  muster alerts silence node05.eu.lab --for 2h --note "replacing its disk"
  muster alerts unsilence node05.eu.lab
  muster alerts test                                   does an alert reach the admins now?`,
    )
    .action(async (o: AlertsOpts) => {
      const n = Number(o.history);
      if (!Number.isInteger(n) || n < 0 || n > 2000) throw new MusterError("MUSTER_USAGE", "--history takes a number of events from 0 to 2000");
      const v = await withHistory(o, async (h) => (await h.history.book()).view(Date.now(), n));
      process.stdout.write(o.json ? `${JSON.stringify(v, null, 2)}\n` : `${renderAlerts(v)}\n`);
      if (v.last_delivery && !v.last_delivery.ok) process.exitCode = 2;
    });

  cmd.addCommand(
    addCommonOptions(new Command("ack"))
      .description("Acknowledge a node's open alerts (or one, by --alert): the history and the console say who is on it")
      .argument("[identity]", "the node whose open alerts are acknowledged")
      .option("--kind <kind>", "only its alert of this kind (unreachable, puppet_failing, service_down, store_copy_stuck)")
      .option("--alert <id>", "one alert by its id (muster alerts --json lists them)")
      .option("--note <text>", "what you are doing about it")
      .action(async (identity: string | undefined, o: CommonOpts & { kind?: string; alert?: string; note?: string }) => {
        if (!identity && !o.alert) throw new MusterError("MUSTER_USAGE", "name the node (muster alerts ack NODE) or the alert (--alert ID)");
        const { ackTargets } = await import("../../health/alert-book.js");
        const acked = await withHistory(o, async (h) => {
          const target = o.alert ?? identity!;
          let open;
          try {
            open = ackTargets(await h.history.book(), { ...(o.alert ? { alert: o.alert } : {}), ...(identity ? { identity } : {}), ...(o.kind ? { kind: o.kind } : {}) });
          } catch (e) {
            await h.audit("alerts.ack", target, { ...(o.kind ? { kind: o.kind } : {}) }, false, (e as Error).message);
            throw new MusterError("MUSTER_NO_OPEN_ALERT", `${(e as Error).message}: see \`muster alerts\``);
          }
          for (const a of open) await h.history.append({ type: "acknowledged", time: Date.now(), by: h.client.key.name, identity: a.identity, kind: a.kind, alert: a.alert, ...(o.note ? { note: o.note } : {}) });
          await h.audit("alerts.ack", target, { alerts: open.map((a) => a.alert), ...(o.note ? { note: o.note } : {}) }, true, `${open.length} acknowledged`);
          return open;
        });
        if (o.json) process.stdout.write(`${JSON.stringify({ acknowledged: acked.map((a) => a.alert) }, null, 2)}\n`);
        else for (const a of acked) process.stdout.write(`acknowledged: ${a.identity} ${a.kind} (fired ${iso(a.fired)})\n`);
      }),
  );

  cmd.addCommand(
    addCommonOptions(new Command("silence"))
      .description("Silence a node's alerts for a stated time: they are kept in the history, not sent; told when the silence ends if the trouble lasts")
      .argument("<identity>", "the node")
      .requiredOption("--for <length>", "how long: 30m, 2h, 1d, 1h30m (a minute to 30 days)")
      .option("--note <text>", "why (a maintenance window, a disk being replaced)")
      .action(async (identity: string, o: CommonOpts & { for: string; note?: string }) => {
        const [{ parseSilenceLength }, { isValidIdentity }] = await Promise.all([import("../../health/alert-book.js"), import("../../protocol/subjects.js")]);
        if (!isValidIdentity(identity)) throw new MusterError("MUSTER_USAGE", `${JSON.stringify(identity.slice(0, 80))} is not a node identity`);
        let ms: number;
        try {
          ms = parseSilenceLength(o.for);
        } catch (e) {
          throw new MusterError("MUSTER_USAGE", `--for takes ${(e as Error).message}`);
        }
        const until = Date.now() + ms;
        await withHistory(o, async (h) => {
          await h.history.append({ type: "silenced", time: Date.now(), by: h.client.key.name, identity, until, ...(o.note ? { note: o.note } : {}) });
          await h.audit("alerts.silence", identity, { until: iso(until), ...(o.note ? { note: o.note } : {}) }, true, `silenced until ${iso(until)}`);
        });
        process.stdout.write(o.json ? `${JSON.stringify({ identity, until: iso(until) })}\n` : `${identity} silenced until ${iso(until)}\n`);
      }),
  );

  cmd.addCommand(
    addCommonOptions(new Command("unsilence"))
      .description("End a node's silence now")
      .argument("<identity>", "the node")
      .action(async (identity: string, o: CommonOpts) => {
        await withHistory(o, async (h) => {
          if (!(await h.history.book()).silenced(identity, Date.now())) {
            await h.audit("alerts.unsilence", identity, {}, false, `${identity} is not silenced`);
            throw new MusterError("MUSTER_USAGE", `${identity} is not silenced: see \`muster alerts\``);
          }
          await h.history.append({ type: "unsilenced", time: Date.now(), by: h.client.key.name, identity });
          await h.audit("alerts.unsilence", identity, {}, true, "silence ended");
        });
        process.stdout.write(`${identity}'s silence ended\n`);
      }),
  );

  cmd.addCommand(
    addCommonOptions(new Command("test"))
      .description("Send a test alert to the admins through the notifier, as the console sends alerts")
      .option("--note <text>", "words to add to the message")
      .option("--notifier <filter>", "compound filter narrowing the notifiers (the console's alerts.notify.filter)")
      .option("--notify-to <url>", "a recipient instead of the notifier's own (repeatable)", (v: string, prev: string[] = []) => [...prev, v])
      .addHelpText("after", "\nExit code 0 when the notifier delivered it (who was told is printed), else 2 with why.")
      .action(async (o: CommonOpts & { note?: string; notifier?: string; notifyTo?: string[] }) => {
        const [{ AdminNotifier }, { sendTestAlert }] = await Promise.all([import("../../fleet/admins.js"), import("../../health/alerter.js")]);
        const r = await withHistory(o, async (h) => {
          const sender = new AdminNotifier(h.client, { ...(o.notifier ? { select: o.notifier } : {}), ...(o.notifyTo?.length ? { recipients: o.notifyTo } : {}) });
          const res = await sendTestAlert(sender, async (e) => void (await h.history.append(e)), h.client.key.name, o.note);
          const d = res.delivery;
          await h.audit("alerts.test", "admins", d.ok ? { notifier: d.notifier, told: d.told } : {}, d.ok, d.ok ? `told ${d.told.join(", ") || "nobody"}` : `not delivered: ${d.error}`);
          return res;
        });
        if (o.json) process.stdout.write(`${JSON.stringify(r.delivery, null, 2)}\n`);
        else if (r.delivery.ok) process.stdout.write(`test alert delivered through ${r.delivery.notifier} to ${r.delivery.told.join(", ") || "the notifier's recipients"}\n`);
        else process.stderr.write(`test alert not delivered: ${r.delivery.error}\n`);
        if (!r.delivery.ok) process.exitCode = 2;
      }),
  );
  return cmd;
}
