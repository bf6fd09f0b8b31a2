// The admins' alerts: whether they arrive (the last delivery: who was told, or what fails since
// when), what is open (who was told, who is on it), which nodes are silenced until when, and the
// history. Operators acknowledge an alert, silence a node for a stated time or end its silence,
// and send a test alert; each is audited. Viewers see all of it and none of the buttons work for
// them (and say why).
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api } from "./api.js";
import { alertEventRow, deliveryText } from "./model.js";
import { when } from "./when.js";

const LENGTHS = ["30m", "1h", "2h", "4h", "8h", "1d", "3d", "7d"];

export function mount(el, ctx, route) {
  let alive = true;
  let view = null;
  let error = null;
  let message = null; // {ok, text}: the last action's outcome
  const operator = ctx.isOperator;
  const roleNote = html`<p class="note" id="alerts-role">Acknowledging, silencing and test alerts need the operator role; you are signed in as ${ctx.session?.name ?? "?"} (${ctx.session?.role ?? "viewer"}).</p>`;
  const button = (label, onClick, cls = "small") =>
    operator ? html`<button type="button" class=${cls} @click=${onClick}>${label}</button>` : html`<button type="button" class=${cls} disabled aria-describedby="alerts-role">${label}</button>`;

  async function act(path, body, done) {
    try {
      const r = await api.post(path, body);
      message = { ok: true, text: done(r) };
    } catch (err) {
      message = { ok: false, text: `${err.code}: ${err.message}` };
    }
    await load();
  }

  const ack = (a) => act("/api/alerts/ack", { alert: a.alert }, () => `acknowledged ${a.subject || a.alert}`);
  const unsilence = (s) => act("/api/alerts/unsilence", { identity: s.identity }, () => `${s.identity}'s silence ended`);
  const test = () => act("/api/alerts/test", {}, (r) => `test alert delivered to ${r.told.join(", ") || "the notifier"} through ${r.notifier}`);
  function silence(ev) {
    ev.preventDefault();
    const f = ev.currentTarget;
    const identity = f.elements.identity.value.trim();
    act("/api/alerts/silence", { identity, for: f.elements.for.value, note: f.elements.note.value.trim() }, (r) => `${r.identity} silenced until ${new Date(r.until).toLocaleString()}`);
  }

  function draw() {
    const now = Date.now();
    const v = view;
    const d = v?.last_delivery ?? null;
    render(
      html`<section class="alerts-page">
        <h1>Alerts</h1>
        <p class="muted">What the admins are told about the fleet's health (unreachable nodes, Puppet failing), through the notifier.</p>
        ${operator ? "" : roleNote}
        ${error ? html`<p class="error" role="alert">${error}</p>` : ""}
        ${message ? html`<p class=${message.ok ? "ok" : "error"} role="status" id="alerts-message">${message.text}</p>` : ""}
        ${v
          ? html`<div class=${`delivery ${d && !d.ok ? "failing" : "fine"}`} id="alerts-delivery" data-ok=${String(!d || d.ok)}>
                <p>${deliveryText(d, now)}</p>
                ${v.enabled ? "" : html`<p class="note">Alerts are turned off in this console's config (alerts.enabled).</p>`}
                ${v.held ? html`<p class="note" id="alerts-held">Alerts are held: ${v.held}.</p>` : ""}
                <p class="actions">${button("Send a test alert", test, "secondary")}</p>
              </div>
              <h2>Open <span class="count">${v.open.length}</span></h2>
              ${v.open.length
                ? html`<table class="data alerts-open">
                    <caption class="visually-hidden">Open alerts, newest first</caption>
                    <thead><tr><th scope="col">node</th><th scope="col">what</th><th scope="col">fired</th><th scope="col">told</th><th scope="col">acknowledged</th></tr></thead>
                    <tbody>
                      ${v.open.map(
                        (a) => html`<tr data-alert=${a.alert} data-identity=${a.identity} data-delivery=${a.delivery}>
                          <td><a href=${`#/node/${encodeURIComponent(a.identity)}`}>${a.identity}</a></td>
                          <td>${a.kind.replace(/_/g, " ")}</td>
                          <td>${when(a.fired, now)}</td>
                          <td>${a.delivery === "told" ? a.told.join(", ") : html`<span class=${a.delivery === "failing" ? "err" : "muted"}>${a.delivery === "failing" ? "not yet: " : "nobody: "}${a.why ?? ""}</span>`}</td>
                          <td>${a.acknowledged ? html`by ${a.acknowledged.by} ${when(a.acknowledged.at, now)}${a.acknowledged.note ? `: ${a.acknowledged.note}` : ""}` : button(html`Acknowledge<span class="visually-hidden"> ${a.identity} ${a.kind}</span>`, () => ack(a))}</td>
                        </tr>`,
                      )}
                    </tbody>
                  </table>`
                : html`<p class="muted" id="alerts-none-open">No alert is open.</p>`}
              <h2>Silenced nodes <span class="count">${v.silences.length}</span></h2>
              ${v.silences.length
                ? html`<ul class="attention-list silences">
                    ${v.silences.map(
                      (s) => html`<li class="attention" data-identity=${s.identity}>
                        <a href=${`#/node/${encodeURIComponent(s.identity)}`}>${s.identity}</a> until ${when(s.until, now)}, by ${s.by}${s.note ? `: ${s.note}` : ""}
                        ${button(html`End the silence<span class="visually-hidden"> of ${s.identity}</span>`, () => unsilence(s), "small secondary")}
                      </li>`,
                    )}
                  </ul>`
                : html`<p class="muted">No node is silenced.</p>`}
              <form id="silence-form" class="filters" @submit=${silence}>
                <label for="silence-identity">Node <input id="silence-identity" name="identity" required spellcheck="false" autocomplete="off" .value=${route.params.silence ?? ""} placeholder="node05.eu.lab" /></label>
                <label for="silence-for">For
                  <select id="silence-for" name="for">
                    ${LENGTHS.map((l) => html`<option value=${l} ?selected=${l === "2h"}>${l}</option>`)}
                  </select>
                </label>
                <label for="silence-note" class="grow">Why <input id="silence-note" name="note" autocomplete="off" placeholder="maintenance window, replacing its disk" /></label>
                ${operator ? html`<button type="submit">Silence</button>` : html`<button type="submit" disabled aria-describedby="alerts-role">Silence</button>`}
              </form>
              <h2>History</h2>
              <table class="data alerts-history">
                <caption class="visually-hidden">What happened to alerts, newest first</caption>
                <thead><tr><th scope="col">when</th><th scope="col">what</th><th scope="col">about</th><th scope="col">who was told, or why not</th><th scope="col">by</th></tr></thead>
                <tbody>
                  ${v.history.map((e) => {
                    const r = alertEventRow(e);
                    return html`<tr data-type=${e.type} data-identity=${e.identity ?? ""}>
                      <td>${when(e.time, now)}</td>
                      <td><span class=${`badge ${r.ok ? "ok" : "failed"}`}>${r.what}</span></td>
                      <td>${r.about}</td>
                      <td class=${r.ok ? "" : "err"}>${r.detail}</td>
                      <td>${e.by}</td>
                    </tr>`;
                  })}
                </tbody>
              </table>`
          : html`<p class="muted">Loading…</p>`}
      </section>`,
      el,
    );
  }

  async function load() {
    try {
      view = await api.get("/api/alerts");
      error = null;
    } catch (err) {
      error = `${err.code}: ${err.message}`;
    }
    if (alive) draw();
  }

  draw();
  load();
  const timer = setInterval(load, 5000);
  return {
    unmount() {
      alive = false;
      clearInterval(timer);
    },
  };
}
