// Fleet-wide Puppet runs (`muster puppet runall`), started from the CLI or here: runs going now with
// the nodes in their slots, past runs, and each node's result (changed, no changes, failed, skipped)
// with a link to its Puppet run on the node page. Starting one shows how many nodes the filter
// matches before anything starts, and above a threshold asks to confirm that count.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { css } from "./css.js";
import { api, liveStream, query } from "./api.js";
import { confirmAction } from "./dialog.js";
import { formatDuration } from "./model.js";
import { when } from "./when.js";

/** The scheduler's outcomes in words, in the order a run card lists them. */
const OUTCOMES = [
  ["changed", "changed"],
  ["ok", "no changes"],
  ["failed", "failed"],
  ["skipped", "skipped"],
  ["busy", "busy"],
  ["vanished", "vanished"],
  ["timeout", "timed out"],
  ["cancelled", "cancelled"],
];
const outcomeLabel = (o) => OUTCOMES.find(([k]) => k === o)?.[1] ?? o;

export function mount(el, ctx) {
  const runs = new Map();
  const results = new Map(); // run id -> results, for runs whose details are open
  const open = new Set();
  let formMessage = null;
  let preview = null; // {filter, matches} | {error}
  let confirmAbove = 10;
  let filterText = "";
  let concurrency = 10;
  const operator = ctx.isOperator;

  function draw() {
    const list = [...runs.values()].sort((a, b) => (a.started < b.started ? 1 : -1));
    const running = list.filter((r) => r.state === "running");
    const past = list.filter((r) => r.state !== "running");
    render(
      html`<section class="runall">
        <h1>Puppet runs</h1>
        <form id="runall-form" class="filters" autocomplete="off" @submit=${start} @input=${onInput}>
          <label class="grow" for="runall-filter"><span>Nodes (a filter, as <code>muster find -S</code>; empty: every node with Puppet)</span>
            <input id="runall-filter" name="filter" spellcheck="false" placeholder="role=web and country=de" .value=${filterText} aria-describedby="runall-preview" />
          </label>
          <label for="runall-concurrency">Concurrency <input id="runall-concurrency" name="concurrency" type="number" min="1" max="10000" .value=${String(concurrency)} /></label>
          <button type="submit" ?disabled=${!operator} aria-describedby=${operator ? "runall-preview" : "runall-role"}>Start runall</button>
        </form>
        <p id="runall-preview" class="muted" data-matches=${preview?.matches ?? ""}>
          ${preview == null
            ? "Type a filter to see how many nodes it matches."
            : preview.error
              ? html`<span class="error">${preview.error}</span>`
              : html`<strong>${preview.matches}</strong> ${preview.matches === 1 ? "node" : "nodes"} with Puppet ${preview.filter ? html`match <code>${preview.filter}</code>` : "in the fleet (no filter)"} in the registry${preview.matches > confirmAbove ? html`; more than ${confirmAbove}, so you confirm the count before it starts` : ""}.`}
        </p>
        ${operator ? "" : html`<p class="note" id="runall-role">Starting a run needs the operator role; you are signed in as ${ctx.session?.name} (${ctx.session?.role}).</p>`}
        ${formMessage ? html`<p class=${formMessage.pending ? "muted" : formMessage.ok ? "ok" : "error"} id="runall-message" role="status">${formMessage.text}</p>` : ""}
        <h2>Running now</h2>
        ${running.length === 0
          ? html`<p class="muted" id="runall-none">${past.length ? "None running now." : "No runs yet."} Runs started with <code>muster puppet runall</code> show here too.</p>`
          : running.map(runCard)}
        <h2>Past runs</h2>
        ${past.length === 0 ? html`<p class="muted">None in the last 30 days (the runall history).</p>` : past.map(runCard)}
      </section>`,
      el,
    );
  }

  function runCard(r) {
    const finished = r.done + r.failed;
    const ended = r.done;
    const pct = r.total > 0 ? (Math.min(ended, r.total) / r.total) * 100 : 0;
    const now = Date.now();
    const started = Date.parse(r.started);
    const outcomes = OUTCOMES.filter(([k]) => r.outcomes?.[k]).map(([k, label]) => html`<span class="outcome" data-outcome=${k}><span class=${`badge ${k}`}>${r.outcomes[k]}</span> ${label}</span>`);
    const res = results.get(r.id);
    return html`<article class="run-card" data-run=${r.id} data-state=${r.state} aria-label=${`run of ${r.filter || "every node"}`}>
      <header>
        <strong>${r.filter || "every node"}</strong>
        <span class=${`badge ${r.state === "running" ? "in_progress" : r.failed ? "failed" : "done"}`}>${r.state}</span>
        <span class="muted">started by ${r.started_by} ${when(started, now)}, concurrency ${r.concurrency}${r.finished ? `, took ${formatDuration((Date.parse(r.finished) - started) / 1000)}` : ""}</span>
      </header>
      <div class="progress" role="progressbar" aria-label="nodes finished" aria-valuemin="0" aria-valuemax=${String(r.total)} aria-valuenow=${String(Math.min(ended, r.total))}><span class="fill" ${css({ width: `${pct.toFixed(1)}%` })}></span></div>
      <p>${r.done} done, ${r.failed} failed, ${Math.max(0, r.total - finished)} to go of ${r.total}</p>
      ${outcomes.length ? html`<div class="outcomes">${outcomes}</div>` : ""}
      ${r.slots?.length
        ? html`<div class="slots" aria-label="running now">
            ${r.slots.map((s) => html`<span class="slot">${s.identity} <span class="muted">${formatDuration((now - Date.parse(s.started)) / 1000)}</span></span>`)}
          </div>`
        : ""}
      ${r.has_results === false
        ? html`<p class="muted">Per-node results are kept for the last runs only.</p>`
        : html`<details class="results" ?open=${open.has(r.id)} @toggle=${(ev) => toggle(r.id, ev.target.open)}>
            <summary>Per-node results</summary>
            ${res ? resultsTable(res) : html`<p class="muted">Loading…</p>`}
          </details>`}
    </article>`;
  }

  function resultsTable(list) {
    if (list.length === 0) return html`<p class="muted">No node has started yet.</p>`;
    const now = Date.now();
    return html`<table class="data run-results">
      <thead><tr><th scope="col">node</th><th scope="col">result</th><th scope="col" class="num">took</th><th scope="col">ended</th><th scope="col">detail</th></tr></thead>
      <tbody>
        ${list.map(
          (x) => html`<tr data-identity=${x.identity} data-outcome=${x.outcome}>
            <th scope="row"><a href=${`#/node/${encodeURIComponent(x.identity)}?section=puppet`}>${x.identity}</a></th>
            <td><span class=${`badge ${x.outcome}`}>${outcomeLabel(x.outcome)}</span></td>
            <td class="num">${x.duration_s == null ? "" : formatDuration(x.duration_s)}</td>
            <td>${x.finished ? when(x.finished, now) : ""}</td>
            <td>${x.detail ?? ""}</td>
          </tr>`,
        )}
      </tbody>
    </table>`;
  }

  async function loadResults(id) {
    try {
      const res = await api.get(`/api/runall/${encodeURIComponent(id)}`);
      if (!alive) return;
      results.set(id, res.results ?? []);
      if (res.run) runs.set(id, res.run);
    } catch (err) {
      results.set(id, []);
      formMessage = { ok: false, text: `${err.code}: ${err.message}` };
    }
    draw();
  }

  function toggle(id, isOpen) {
    if (isOpen === open.has(id)) return;
    if (isOpen) {
      open.add(id);
      loadResults(id);
    } else open.delete(id);
  }

  // Results of open runs follow their run events, at most once a second each.
  const pendingLoads = new Map();
  function refreshResults(id) {
    if (!open.has(id) || pendingLoads.has(id)) return;
    pendingLoads.set(
      id,
      setTimeout(() => {
        pendingLoads.delete(id);
        loadResults(id);
      }, 1000),
    );
  }

  let previewTimer = 0;
  let previewGen = 0;
  function onInput(ev) {
    const f = ev.currentTarget;
    filterText = f.elements.filter.value;
    concurrency = Number(f.elements.concurrency.value) || 1;
    if (ev.target.name !== "filter") return;
    clearTimeout(previewTimer);
    previewTimer = setTimeout(loadPreview, 350);
  }

  async function loadPreview() {
    const gen = ++previewGen;
    const filter = filterText.trim();
    try {
      const res = await api.get(`/api/runall/preview${query({ filter })}`);
      if (gen !== previewGen || !alive) return;
      preview = { filter, matches: res.matches };
      confirmAbove = res.confirm_above ?? confirmAbove;
    } catch (err) {
      if (gen !== previewGen || !alive) return;
      preview = { error: err.code === "filter" ? `The filter does not parse (column ${err.column}): ${err.message}` : `${err.code}: ${err.message}` };
    }
    draw();
  }

  async function start(ev) {
    ev.preventDefault();
    if (!operator) return;
    const f = ev.target;
    const body = { filter: f.elements.filter.value.trim(), concurrency: Number(f.elements.concurrency.value) || 1 };
    formMessage = { pending: true, text: "discovering nodes…" };
    draw();
    try {
      let res;
      try {
        res = await api.post("/api/runall", body);
      } catch (err) {
        if (err.code !== "confirm") throw err;
        const n = err.matches;
        const ok = await confirmAction({
          title: `Run Puppet on ${n} nodes?`,
          body: html`<p>${body.filter ? html`The filter <code>${body.filter}</code> matches` : "With no filter, this is every node with Puppet:"} <strong>${n}</strong> nodes. Puppet runs on them ${body.concurrency} at a time, applying their catalogs.</p>`,
          confirm: `Run Puppet on ${n} nodes`,
          danger: true,
        });
        if (!ok) {
          formMessage = { ok: false, text: `not started: ${n} nodes matched and the run was not confirmed` };
          return draw();
        }
        res = await api.post("/api/runall", { ...body, confirm: n });
      }
      formMessage = { ok: true, text: `started run ${res.id}` };
    } catch (err) {
      formMessage = { ok: false, text: err.code === "forbidden" ? `refused: ${err.message}` : `${err.code}: ${err.message}` };
    }
    draw();
  }

  let alive = true;
  api
    .get("/api/runall")
    .then((res) => {
      if (!alive) return;
      for (const r of res.runs ?? []) runs.set(r.id, r);
      confirmAbove = res.confirm_above ?? confirmAbove;
      draw();
    })
    .catch((err) => {
      formMessage = { ok: false, text: `${err.code}: ${err.message}` };
      draw();
    });
  const stream = liveStream("/api/runall/events", {
    run: (r) => {
      if (!r?.id) return;
      runs.set(r.id, r);
      refreshResults(r.id);
      draw();
    },
  });
  const ticker = setInterval(() => runs.size && draw(), 1000);
  draw();
  return {
    unmount() {
      alive = false;
      stream.close();
      clearInterval(ticker);
      clearTimeout(previewTimer);
      for (const t of pendingLoads.values()) clearTimeout(t);
    },
  };
}
