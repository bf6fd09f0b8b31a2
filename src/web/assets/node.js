// One node: its facts, classes, agents and collectives from the registry, its provisioning record
// with the stage timeline and log tail, and the summary of its last Puppet run.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api } from "./api.js";
import { cellText, elapsedSeconds, formatDuration } from "./model.js";
import { timelineTable } from "./timeline.js";

function kvTable(obj, cls = "kv") {
  const entries = Object.entries(obj ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (entries.length === 0) return html`<p class="muted">none</p>`;
  return html`<table class=${cls}>
    ${entries.map(([k, v]) => html`<tr><th>${k}</th><td>${cellText(v)}</td></tr>`)}
  </table>`;
}

function list(items) {
  if (!items?.length) return html`<p class="muted">none</p>`;
  return html`<ul class="tags">${items.map((i) => html`<li>${i}</li>`)}</ul>`;
}

export function mount(el, ctx, route) {
  const identity = route.arg ?? "";
  let alive = true;
  render(html`<p class="muted">Loading ${identity}…</p>`, el);

  async function load() {
    let n;
    try {
      n = await api.get(`/api/nodes/${encodeURIComponent(identity)}`);
    } catch (err) {
      if (!alive) return;
      render(html`<section class="node"><h1>${identity}</h1><p class="error">${err.status === 404 ? `No node ${identity} in the registry or the provisioning state.` : `${err.code}: ${err.message}`}</p></section>`, el);
      return;
    }
    if (!alive) return;
    const p = n.provisioning;
    render(
      html`<section class="node" data-identity=${n.identity}>
        <h1>${n.identity}</h1>
        <div class="cols">
          <div>
            <h2>Provisioning</h2>
            ${p
              ? html`<p><span class=${`badge ${p.status}`}>${p.status}</span> stage ${p.stage ?? "none"}, master ${p.master ?? "none"},
                  ${formatDuration(elapsedSeconds(p, Date.now()))}, ${p.tries ?? 0} tries</p>
                  ${p.last_error ? html`<p class="err">${p.last_error}</p>` : ""}
                  ${timelineTable(p.timeline)}
                  <h3>Log tail</h3>
                  <pre class="logtail">${(p.log_tail ?? []).join("\n")}</pre>`
              : html`<p class="muted">Not provisioned by muster (no record in the state bucket).</p>`}
            <h2>Last Puppet run</h2>
            ${n.last_run_summary ? kvTable(flatten(n.last_run_summary)) : html`<p class="muted">No run reported.</p>`}
            <h2>Classes</h2>
            ${list(n.classes)}
            <h2>Agents</h2>
            ${list(n.agents)}
            <h2>Collectives</h2>
            ${list(n.collectives)}
          </div>
          <div>
            <h2>Facts</h2>
            ${kvTable(flatten(n.facts), "kv facts")}
          </div>
        </div>
      </section>`,
      el,
    );
  }
  load();
  return {
    unmount() {
      alive = false;
    },
  };
}

/** {time: {total: 3}} -> {"time.total": 3}: structured facts and a run summary as one table, by the dotted names filters use. */
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = v;
  }
  return out;
}
