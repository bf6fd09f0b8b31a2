// Who did what (operators only): the console's recorded actions and refusals, the CLI's, and, where
// the nodes publish their audit records to the audit stream, every request they handled from the
// CLI or anyone else. Newest first; filtered by user and action, kept in the address. Reads (a node
// page asking a node's puppet agent) are left out unless "reads too" is ticked.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api, query } from "./api.js";
import { routeHash } from "./model.js";
import { when } from "./when.js";

const brief = (data) => {
  const parts = [];
  for (const [k, v] of Object.entries(data ?? {})) {
    if (k === "role" || k === "via") continue;
    const t = typeof v === "string" ? v : JSON.stringify(v);
    parts.push(`${k}=${t.length > 80 ? `${t.slice(0, 79)}…` : t}`);
  }
  return parts.join(" ");
};

export function mount(el, ctx, route) {
  let alive = true;
  const state = { user: route.params.user ?? "", action: route.params.action ?? "", refused: route.params.refused === "1", reads: route.params.reads === "1" };
  let page = null;
  let error = null;

  function draw() {
    const now = Date.now();
    render(
      html`<section class="audit">
        <h1>Audit</h1>
        <p class="muted">What operators did through this console, and what they were refused; with the nodes' audit stream, every request the nodes handled, from the CLI too.</p>
        ${ctx.isOperator
          ? html`<form id="audit-form" class="filters" @change=${onChange} @submit=${(ev) => ev.preventDefault()}>
              <label for="audit-user">User
                <select id="audit-user" name="user">
                  <option value="" ?selected=${!state.user}>everyone</option>
                  ${(page?.users ?? []).map((u) => html`<option value=${u} ?selected=${u === state.user}>${u}</option>`)}
                </select>
              </label>
              <label for="audit-action">Action
                <select id="audit-action" name="action">
                  <option value="" ?selected=${!state.action}>every action</option>
                  ${(page?.actions ?? []).map((a) => html`<option value=${a} ?selected=${a === state.action}>${a}</option>`)}
                </select>
              </label>
              <span class="check"><input id="audit-refused" name="refused" type="checkbox" .checked=${state.refused} /> <label for="audit-refused">refusals and failures only</label></span>
              <span class="check"><input id="audit-reads" name="reads" type="checkbox" .checked=${state.reads} /> <label for="audit-reads">reads too</label></span>
            </form>`
          : ""}
        ${error ? html`<p class="error" role="alert">${error}</p>` : ""}
        ${page
          ? html`<p class="muted" id="audit-sources">${page.sources.map((s) => html`<span>${s.name}: ${s.ok ? `${s.records} records` : s.error}. </span>`)}</p>
              <p id="audit-total">${page.total} ${page.total === 1 ? "record" : "records"}${page.total > page.rows.length ? `, the newest ${page.rows.length} shown` : ""}${page.reads_hidden ? `; ${page.reads_hidden} reads left out (tick "reads too")` : ""}</p>
              <table class="data audit-table">
                <caption class="visually-hidden">Audit records, newest first</caption>
                <thead><tr><th scope="col">when</th><th scope="col">user</th><th scope="col">action</th><th scope="col">target</th><th scope="col">outcome</th><th scope="col">details</th></tr></thead>
                <tbody>
                  ${page.rows.map(
                    (r) => html`<tr data-user=${r.user} data-action=${r.action} data-ok=${String(r.ok)} data-source=${r.source}>
                      <td>${when(r.time, now)}</td>
                      <td>${r.user}</td>
                      <td>${r.action}${r.source === "console" ? "" : html` <span class="muted">(${r.source === "cli" ? "CLI" : r.read ? "node, read" : "node"})</span>`}</td>
                      <td>${r.target}</td>
                      <td><span class=${`badge ${r.ok ? "ok" : "refused"}`}>${r.ok ? "done" : "refused"}</span> ${r.outcome}</td>
                      <td class="details">${brief(r.data)}</td>
                    </tr>`,
                  )}
                </tbody>
              </table>`
          : ctx.isOperator
            ? html`<p class="muted">Loading…</p>`
            : ""}
      </section>`,
      el,
    );
  }

  async function load() {
    try {
      page = await api.get(`/api/audit${query({ user: state.user, action: state.action, refused: state.refused ? "1" : "", reads: state.reads ? "1" : "" })}`);
      error = null;
    } catch (err) {
      error = err.code === "forbidden" ? `The audit is for operators; you are signed in as ${ctx.session?.name} (${ctx.session?.role}).` : `${err.code}: ${err.message}`;
    }
    if (alive) draw();
  }

  function onChange(ev) {
    const f = ev.currentTarget;
    state.user = f.elements.user.value;
    state.action = f.elements.action.value;
    state.refused = f.elements.refused.checked;
    state.reads = f.elements.reads.checked;
    history.replaceState(null, "", routeHash("audit", undefined, { user: state.user, action: state.action, refused: state.refused ? "1" : "", reads: state.reads ? "1" : "" }));
    load();
  }

  draw();
  load();
  const timer = setInterval(load, 10_000);
  return {
    unmount() {
      alive = false;
      clearInterval(timer);
    },
  };
}
