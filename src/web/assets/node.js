// One node: its provisioning record (status, gone or stuck, the stage timeline, the log tail, a
// retry for a failed node), its last Puppet run as people read it (status, when in relative and
// local time, how long, resource counts, failed resources with their messages), then its classes,
// agents, collectives and facts from the registry. `?section=puppet` (the runall page's links)
// brings the Puppet run into view.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api } from "./api.js";
import { confirmAction } from "./dialog.js";
import { cellText, elapsedSeconds, formatDuration, formatRelative, puppetRunView } from "./model.js";
import { timelineTable } from "./timeline.js";

function kvTable(obj, cls = "kv", caption = "") {
  const entries = Object.entries(obj ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (entries.length === 0) return html`<p class="muted">none</p>`;
  return html`<table class=${cls}>
    ${caption ? html`<caption class="visually-hidden">${caption}</caption>` : ""}
    <tbody>
      ${entries.map(([k, v]) => html`<tr><th scope="row">${k}</th><td>${cellText(v)}</td></tr>`)}
    </tbody>
  </table>`;
}

function list(items, label) {
  if (!items?.length) return html`<p class="muted">none</p>`;
  return html`<ul class="tags" aria-label=${label}>${items.map((i) => html`<li>${i}</li>`)}</ul>`;
}

// In the operator's own time zone, named (dateStyle cannot be combined with timeZoneName).
const localTime = (ms) => new Date(ms).toLocaleString([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });

function puppetSection(n) {
  const v = puppetRunView(n.last_run_summary, n.puppet_status, n.last_run_report);
  const now = Date.now();
  if (!v) return html`<p class="muted">No Puppet run reported (the node has no puppet agent, has not run Puppet yet, or did not answer).</p>`;
  return html`<div class="puppet-run" data-status=${v.status}>
    <p>
      <span class=${`badge ${v.status === "failed" ? "failed" : v.status === "changed" ? "changed" : "ok"}`}>${v.label}</span>
      ${v.at ? html`<time datetime=${new Date(v.at).toISOString()}>${formatRelative(v.at, now)}</time> <span class="muted">(${localTime(v.at)})</span>` : ""}${v.duration_s != null ? `, took ${formatDuration(v.duration_s)}` : ""}${v.environment ? html`, environment <code>${v.environment}</code>` : ""}
    </p>
    ${v.enabled === false ? html`<p class="note">Puppet is disabled here${v.disable_message ? `: ${v.disable_message}` : ""}.</p>` : ""}
    ${v.applying ? html`<p class="note">A run is applying a catalog right now.</p>` : ""}
    ${v.message ? html`<p>${v.message}</p>` : ""}
    ${v.counts.length
      ? html`<table class="data counts-table">
          <caption class="visually-hidden">Resources in the last run</caption>
          <thead><tr>${v.counts.map((c) => html`<th scope="col" class="num">${c.name}</th>`)}</tr></thead>
          <tbody><tr>${v.counts.map((c) => html`<td class="num" data-count=${c.name}>${c.value}</td>`)}</tr></tbody>
        </table>`
      : ""}
    ${v.failed_resources.length
      ? html`<h3>Failed resources</h3>
          <ul class="failed-resources">
            ${v.failed_resources.map((f) => html`<li><code>${f.resource}</code>${f.messages.length ? html`<ul>${f.messages.map((m) => html`<li class="err">${m}</li>`)}</ul>` : ""}</li>`)}
          </ul>`
      : ""}
    ${v.changed_resources.length
      ? html`<h3>Changed resources</h3>
          <ul class="changed-resources">
            ${v.changed_resources.map((c) => html`<li><code>${c.resource}</code>${c.messages.length ? html`<ul>${c.messages.map((m) => html`<li>${m}</li>`)}</ul>` : ""}</li>`)}
          </ul>`
      : ""}
    ${v.left_out ? html`<p class="muted">and ${v.left_out} more changed or failed resources (the report lists them all)</p>` : ""}
    ${v.errors.length ? html`<h3>Errors</h3><ul>${v.errors.map((e) => html`<li class="err">${e}</li>`)}</ul>` : ""}
    <p class="muted">${v.config_version ? `catalog ${v.config_version}` : ""}${v.puppet_version ? `, Puppet ${v.puppet_version}` : ""}</p>
  </div>`;
}

export function mount(el, ctx, route) {
  const identity = route.arg ?? "";
  let alive = true;
  let retryMessage = null;
  let node = null;
  render(html`<p class="muted">Loading ${identity}…</p>`, el);

  async function retry() {
    const ok = await confirmAction({ title: `Retry ${identity}?`, body: html`<p>It goes back to pending, and the provisioner starts it over at its next cycle.</p>`, confirm: "Retry" });
    if (!ok) return;
    try {
      await api.post(`/api/board/${encodeURIComponent(identity)}/retry`);
      retryMessage = { ok: true, text: "retry requested" };
    } catch (err) {
      retryMessage = { ok: false, text: `${err.code}: ${err.message}` };
    }
    draw();
  }

  function draw() {
    const n = node;
    const p = n.provisioning;
    render(
      html`<section class="node" data-identity=${n.identity}>
        <h1>${n.identity}</h1>
        <div class="cols">
          <div>
            <h2>Provisioning</h2>
            ${p
              ? html`<p><span class=${`badge ${p.status}`}>${p.status}</span>${p.gone ? html` <span class="badge gone">gone</span>` : p.waiting ? html` <span class="badge waiting">waiting</span>` : ""} stage ${p.stage || "none"}, master ${p.master ?? "none"},
                  ${formatDuration(elapsedSeconds(p, Date.now()))}, ${p.tries ?? 0} tries</p>
                  ${p.gone ? html`<p class="note">The provisioner found this node gone ${formatRelative(Date.parse(p.gone.since), Date.now())} (${localTime(Date.parse(p.gone.since))}): ${p.gone.reason}</p>` : ""}
                  ${p.waiting ? html`<p class="note">Since ${formatRelative(Date.parse(p.waiting.since), Date.now())} (${localTime(Date.parse(p.waiting.since))}): ${p.waiting.reason}. It holds no slot and is taken up when the master answers.</p>` : ""}
                  ${p.last_error ? html`<p class="err">${p.last_error}</p>` : ""}
                  ${p.status === "failed"
                    ? html`<p>
                        <button type="button" id="node-retry" ?disabled=${!ctx.isOperator} aria-describedby=${ctx.isOperator ? "" : "node-role"} @click=${retry}>Retry provisioning</button>
                        ${ctx.isOperator ? "" : html`<span class="muted" id="node-role">Needs the operator role; you are a ${ctx.session?.role}.</span>`}
                        ${retryMessage ? html`<span class=${retryMessage.ok ? "ok" : "error"} role="status">${retryMessage.text}</span>` : ""}
                      </p>`
                    : ""}
                  ${timelineTable(p.timeline)}
                  <h3>Log tail</h3>
                  <pre class="logtail" tabindex="0" aria-label="provisioning log tail">${(p.log_tail ?? []).join("\n")}</pre>`
              : html`<p class="muted">Not provisioned by muster (no record in the state bucket).</p>`}
            <h2 id="puppet">Last Puppet run</h2>
            ${puppetSection(n)}
            <h2>Classes</h2>
            ${list(n.classes, "classes")}
            <h2>Agents</h2>
            ${list(n.agents, "agents")}
            <h2>Collectives</h2>
            ${list(n.collectives, "collectives")}
          </div>
          <div>
            <h2>Facts</h2>
            ${kvTable(flatten(n.facts), "kv facts", "facts")}
          </div>
        </div>
      </section>`,
      el,
    );
  }

  async function load() {
    try {
      node = await api.get(`/api/nodes/${encodeURIComponent(identity)}`);
    } catch (err) {
      if (!alive) return;
      render(html`<section class="node"><h1>${identity}</h1><p class="error">${err.status === 404 ? `No node ${identity} in the registry or the provisioning state.` : `${err.code}: ${err.message}`}</p></section>`, el);
      return;
    }
    if (!alive) return;
    draw();
    if (route.params.section === "puppet") el.querySelector("#puppet")?.scrollIntoView({ block: "start" });
  }
  load();
  return {
    unmount() {
      alive = false;
    },
  };
}

/** {time: {total: 3}} -> {"time.total": 3}: structured facts as one table, by the dotted names filters use. */
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = v;
  }
  return out;
}
