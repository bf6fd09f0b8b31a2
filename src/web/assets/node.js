// One node: its health (reachable, when last heard, every problem with why), its provisioning
// record (status, gone or stuck, the stage timeline, its rounds with who retried, the log tail;
// retry for a failed or gone node, forget for a gone one), its last Puppet run as people read it
// (status, when, how long, resource counts, failed and changed resources with their messages) and
// its last runs, its runs as PuppetDB recorded them (with a failed run's failed events), then its
// classes, agents, collectives and facts (grouped, searchable) from the registry. `?section=puppet` (the runall page's links) brings the Puppet run into view.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api } from "./api.js";
import { confirmAction } from "./dialog.js";
import { cellText, factGroups, formatDuration, HEALTH_KINDS, knownRunView, provisioningLine, puppetRunView, roundRows } from "./model.js";
import { timelineTable } from "./timeline.js";
import { when } from "./when.js";

function list(items, label) {
  if (!items?.length) return html`<p class="muted">none</p>`;
  return html`<ul class="tags" aria-label=${label}>${items.map((i) => html`<li>${i}</li>`)}</ul>`;
}

const kindLabel = (k) => HEALTH_KINDS.find((x) => x.kind === k)?.one ?? k;

function healthSection(n) {
  const h = n.health;
  if (!h) return html`<p class="muted">Fleet health does not know this node (no heartbeat, registration or provisioning record).</p>`;
  return html`<div class="node-health" data-reachable=${String(h.reachable)}>
    <p>
      <span class=${`badge ${h.reachable ? "ok" : "failed"}`}>${h.reachable ? "reachable" : "unreachable"}</span>
      ${h.last_seen ? html`last heartbeat ${when(h.last_seen)}` : html`<span class="muted">no heartbeat ever</span>`}${h.phase === "waiting" ? html`, waiting to be provisioned` : ""}${n.registry_age_s != null ? html`; last registered ${when(Date.now() - n.registry_age_s * 1000)}` : ""}
    </p>
    ${h.problems.length
      ? html`<ul class="attention-list">
          ${h.problems.map((p) => html`<li class=${`attention kind-${p.kind}`} data-kind=${p.kind}><strong>${kindLabel(p.kind)}</strong>: ${p.why}${p.since ? html` <span class="muted">(since ${when(p.since)})</span>` : ""}</li>`)}
        </ul>`
      : html`<p class="ok">Healthy.</p>`}
  </div>`;
}

function roundsTable(history) {
  const rows = roundRows(history);
  if (!rows.length) return html``;
  return html`<h3>Rounds</h3>
    <table class="data rounds-table">
      <caption class="visually-hidden">Provisioning rounds: starts, failures, retries and who retried</caption>
      <thead><tr><th scope="col">when</th><th scope="col" class="num">round</th><th scope="col">what</th><th scope="col">stage</th><th scope="col">detail</th></tr></thead>
      <tbody>
        ${rows.map((r) => html`<tr data-event=${r.event}><td>${when(r.at)}</td><td class="num">${r.round}</td><td>${r.what}</td><td>${r.stage}</td><td>${r.detail ? html`<span class=${r.event === "failed" ? "err" : "muted"}>${r.detail}</span>` : ""}</td></tr>`)}
      </tbody>
    </table>`;
}

function runsTable(runs) {
  if (!runs?.length) return html``;
  return html`<h3>Last runs</h3>
    <table class="data puppet-runs">
      <caption class="visually-hidden">The node's last Puppet runs, newest first</caption>
      <thead><tr><th scope="col">ended</th><th scope="col">status</th><th scope="col" class="num">changed</th><th scope="col" class="num">failed</th><th scope="col" class="num">resources</th><th scope="col" class="num">took</th></tr></thead>
      <tbody>
        ${runs.map((r) => html`<tr data-status=${r.status}><td>${when(r.time)}</td><td><span class=${`badge ${r.status === "unchanged" ? "ok" : r.status}`}>${r.status === "unchanged" ? "no changes" : r.status}</span></td><td class="num">${r.resources.changed}</td><td class="num">${r.resources.failed}</td><td class="num">${r.resources.total}</td><td class="num">${r.duration_s == null ? "" : formatDuration(r.duration_s)}</td></tr>`)}
      </tbody>
    </table>`;
}

// Its last runs as PuppetDB recorded them (where the registry reaches a PuppetDB): the record of
// Puppet runs fleet health keeps then; a failed run with the events that failed.
function puppetdbSection(n) {
  if (n.puppetdb_error) return html`<h2 id="puppetdb">Runs in PuppetDB</h2><p class="error">PuppetDB could not be asked: ${n.puppetdb_error}</p>`;
  if (n.puppetdb_runs == null) return html``;
  return html`<h2 id="puppetdb">Runs in PuppetDB</h2>
    ${n.puppetdb_runs.length
      ? html`<table class="data puppetdb-runs">
          <caption class="visually-hidden">The node's last Puppet runs as PuppetDB recorded them, newest first</caption>
          <thead><tr><th scope="col">ended</th><th scope="col">status</th><th scope="col" class="num">changed</th><th scope="col" class="num">failed</th><th scope="col" class="num">resources</th><th scope="col">failed events</th></tr></thead>
          <tbody>
            ${n.puppetdb_runs.map(
              (r) => html`<tr data-status=${r.status}>
                <td>${when(r.time)}</td>
                <td><span class=${`badge ${r.status === "unchanged" ? "ok" : r.status}`}>${r.status === "unchanged" ? "no changes" : r.status}</span>${r.noop ? html` <span class="muted">noop</span>` : ""}</td>
                <td class="num">${r.resources.changed}</td>
                <td class="num">${r.resources.failed}</td>
                <td class="num">${r.resources.total}</td>
                <td>${r.events.length ? html`<ul class="failed-events">${r.events.map((e) => html`<li><code>${e.type}[${e.title}]</code>${e.property ? html` <span class="muted">${e.property}</span>` : ""}${e.message ? html`: <span class="err">${e.message}</span>` : ""}</li>`)}</ul>` : ""}</td>
              </tr>`,
            )}
          </tbody>
        </table>`
      : html`<p class="muted">PuppetDB holds no report of this node.</p>`}
    <p class="muted">From ${n.puppetdb}.</p>`;
}

function factsSection(facts, find, onFind) {
  const groups = factGroups(facts, find);
  const total = groups.reduce((n, g) => n + g.entries.length, 0);
  return html`<div class="facts">
    <label for="fact-find" class="inline-label">Find a fact</label>
    <input id="fact-find" type="search" spellcheck="false" autocomplete="off" placeholder="name or value, e.g. os.family or debian" .value=${find} @input=${onFind} aria-describedby="fact-count" />
    <p id="fact-count" class="muted" role="status">${find ? `${total} matching` : `${total} facts`}</p>
    ${groups.map(
      (g) => html`<details class="fact-group" ?open=${Boolean(find) || groups.length === 1 || g.name === "(top level)"} data-group=${g.name}>
        <summary>${g.name} <span class="muted">${g.entries.length}</span></summary>
        <table class="kv facts">
          <caption class="visually-hidden">facts: ${g.name}</caption>
          <tbody>
            ${g.entries.map(([k, v]) => html`<tr><th scope="row">${k}</th><td>${cellText(v)}</td></tr>`)}
          </tbody>
        </table>
      </details>`,
    )}
  </div>`;
}

function puppetSection(n) {
  // what the node's puppet agent says; when it was not asked or did not answer, what health knows
  const hp = n.health?.puppet;
  const v = puppetRunView(n.last_run_summary, n.puppet_status, n.last_run_report) ?? knownRunView(n.puppet_runs?.[0] ?? (hp?.status ? { status: hp.status, last_run: hp.last_run, resources: hp.resources } : null));
  const now = Date.now();
  if (!v) return html`<p class="muted">No Puppet run reported (the node has no puppet agent, has not run Puppet yet, or did not answer).</p>`;
  return html`<div class="puppet-run" data-status=${v.status} data-source=${v.known_only ? "health" : "node"}>
    ${v.known_only ? html`<p class="note" id="puppet-known">The last run fleet health knows: ${n.agent_asked === false ? "the node is unreachable, so it was not asked" : "the node's puppet agent did not answer"}.</p>` : ""}
    <p>
      <span class=${`badge ${v.status === "failed" ? "failed" : v.status === "changed" ? "changed" : "ok"}`}>${v.label}</span>
      ${v.at ? when(v.at, now) : ""}${v.duration_s != null ? `, took ${formatDuration(v.duration_s)}` : ""}${v.environment ? html`, environment <code>${v.environment}</code>` : ""}
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
  let factFind = route.params.fact ?? "";
  render(html`<p class="muted">Loading ${identity}…</p>`, el);

  async function retry() {
    const gone = Boolean(node?.provisioning?.gone);
    const ok = await confirmAction({ title: `Retry ${identity}${gone ? " now" : ""}?`, body: html`<p>${gone ? "The provisioner stops waiting for it to come back: it" : "It"} goes back to pending, and the provisioner starts it over at its next cycle.</p>`, confirm: gone ? "Retry now" : "Retry" });
    if (!ok) return;
    try {
      await api.post(`/api/board/${encodeURIComponent(identity)}/retry`);
      retryMessage = { ok: true, text: "retry requested" };
    } catch (err) {
      retryMessage = { ok: false, text: `${err.code}: ${err.message}` };
    }
    await load();
  }

  async function forget() {
    const ok = await confirmAction({ title: `Forget ${identity}?`, body: html`<p>Its provisioning record and its last heartbeat are dropped: it leaves the board and fleet health. Should it ever wait again, it is provisioned afresh. (To take a node out for good, with its certificate, use <code>muster decommission</code>.)</p>`, confirm: "Forget", danger: true });
    if (!ok) return;
    try {
      await api.post(`/api/board/${encodeURIComponent(identity)}/forget`);
      retryMessage = { ok: true, text: "forgotten" };
    } catch (err) {
      retryMessage = { ok: false, text: `${err.code}: ${err.message}` };
    }
    await load().catch(() => undefined);
  }

  const onFind = (e) => {
    factFind = e.target.value;
    draw();
    // keep the caret: lit re-renders the same input element
  };

  function draw() {
    const n = node;
    const p = n.provisioning;
    render(
      html`<section class="node" data-identity=${n.identity}>
        <h1>${n.identity}</h1>
        ${healthSection(n)}
        <div class="cols">
          <div>
            <h2>Provisioning</h2>
            ${p
              ? html`<p><span class=${`badge ${p.status}`}>${p.status}</span>${p.gone ? html` <span class="badge gone">gone</span>` : p.waiting ? html` <span class="badge waiting">waiting</span>` : ""} ${provisioningLine(p, Date.now())}</p>
                  ${p.gone ? html`<p class="note">The provisioner found this node gone ${when(p.gone.since)}: ${p.gone.reason}. It waits for it to come back; retry now or forget it rather than wait.</p>` : ""}
                  ${p.waiting ? html`<p class="note">Since ${when(p.waiting.since)}: ${p.waiting.reason}. It holds no slot and is taken up when the master answers.</p>` : ""}
                  ${p.last_error ? html`<p class="err">${p.last_error}</p>` : ""}
                  ${p.status === "failed" || p.gone
                    ? html`<p class="actions">
                        <button type="button" id="node-retry" ?disabled=${!ctx.isOperator} aria-describedby=${ctx.isOperator ? "" : "node-role"} @click=${retry}>${p.gone ? "Retry now" : "Retry provisioning"}</button>
                        <button type="button" id="node-forget" class="secondary" ?disabled=${!ctx.isOperator} aria-describedby=${ctx.isOperator ? "" : "node-role"} @click=${forget}>Forget</button>
                        ${ctx.isOperator ? "" : html`<span class="muted" id="node-role">Needs the operator role; you are a ${ctx.session?.role}.</span>`}
                        ${retryMessage ? html`<span class=${retryMessage.ok ? "ok" : "error"} role="status">${retryMessage.text}</span>` : ""}
                      </p>`
                    : ""}
                  ${timelineTable(p.timeline)}
                  ${roundsTable(p.history)}
                  <h3>Log tail</h3>
                  <pre class="logtail" tabindex="0" role="region" aria-label="provisioning log tail">${(p.log_tail ?? []).join("\n")}</pre>`
              : html`<p class="muted">Not provisioned by muster (no record in the state bucket).</p>`}
            <h2 id="puppet">Last Puppet run</h2>
            ${puppetSection(n)}
            ${runsTable(n.puppet_runs)}
            ${puppetdbSection(n)}
            <h2>Classes</h2>
            ${list(n.classes, "classes")}
            <h2>Agents</h2>
            ${list(n.agents, "agents")}
            <h2>Collectives</h2>
            ${list(n.collectives, "collectives")}
          </div>
          <div>
            <h2>Facts</h2>
            ${n.registered ? "" : html`<p class="note" id="not-registered">The registry no longer has this node${n.health?.last_seen ? html`: its last heartbeat was ${when(n.health.last_seen)}` : ""}. Its facts, classes and agents show again once it registers.</p>`}
            ${factsSection(n.facts, factFind, onFind)}
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
