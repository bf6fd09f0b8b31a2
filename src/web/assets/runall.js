// Fleet-wide Puppet runs (`muster puppet runall`), started from the CLI or here: each run's
// progress and the nodes in its slots right now, live from /api/runall/events.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { css } from "./css.js";
import { api, liveStream } from "./api.js";
import { formatDuration } from "./model.js";

export function mount(el, ctx) {
  const runs = new Map();
  let formMessage = null;

  function draw() {
    const list = [...runs.values()].sort((a, b) => (a.started < b.started ? 1 : -1));
    render(
      html`<section class="runall">
        <h1>Puppet runs</h1>
        <form id="runall-form" class="filters" autocomplete="off" @submit=${start}>
          <label class="grow">Nodes (filter, as <code>-S</code>) <input name="filter" spellcheck="false" placeholder="empty: every node" /></label>
          <label>Concurrency <input name="concurrency" type="number" min="1" value="10" /></label>
          <button type="submit" title=${ctx.isOperator ? "Start a Puppet run on these nodes" : "Starting a run needs the operator role"}>Start runall</button>
        </form>
        ${formMessage ? html`<p class=${formMessage.ok ? "ok" : "error"} id="runall-message">${formMessage.text}</p>` : ""}
        ${list.length === 0 ? html`<p class="muted">No runs yet. Runs started with <code>muster puppet runall</code> show here too.</p>` : ""}
        ${list.map((r) => runCard(r))}
      </section>`,
      el,
    );
  }

  function runCard(r) {
    const finished = r.done + r.failed;
    const pct = r.total > 0 ? (finished / r.total) * 100 : 0;
    const now = Date.now();
    return html`<article class="run-card" data-run=${r.id} data-state=${r.state}>
      <header>
        <strong>${r.filter || "every node"}</strong>
        <span class=${`badge ${r.state === "running" ? "in_progress" : r.failed ? "failed" : "done"}`}>${r.state}</span>
        <span class="muted">started by ${r.started_by} at ${new Date(r.started).toLocaleTimeString()}, concurrency ${r.concurrency}</span>
      </header>
      <div class="progress"><span class="fill" ${css({ width: `${pct.toFixed(1)}%` })}></span></div>
      <p>${r.done} done, ${r.failed} failed, ${r.total - finished} to go of ${r.total}</p>
      ${r.slots?.length
        ? html`<div class="slots">
            ${r.slots.map((s) => html`<span class="slot" title=${s.identity}>${s.identity} <span class="muted">${formatDuration((now - Date.parse(s.started)) / 1000)}</span></span>`)}
          </div>`
        : ""}
    </article>`;
  }

  async function start(ev) {
    ev.preventDefault();
    const f = ev.target;
    try {
      const res = await api.post("/api/runall", { filter: f.elements.filter.value.trim(), concurrency: Number(f.elements.concurrency.value) || 1 });
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
    },
  };
}
