// How fast provisioning goes: nodes done and failed per minute over the last three hours (a bar
// chart, with the same figures as a table), an estimate of when what waits will be through, and per
// stage and per master how long things take (p50, p95) and how many are under way. Live from
// /api/progress/events; the figures are the server's (src/web/progress.ts), from the state bucket.
import { html, svg, render } from "/vendor/lit-html/lit-html.js";
import { api, liveStream } from "./api.js";
import { chartTicks, formatDuration, formatEta } from "./model.js";

const W = 900;
const H = 180;
const PAD = { left: 36, right: 16, top: 10, bottom: 22 };

const ms = (x) => (x == null ? "" : formatDuration(x / 1000) || "0ms");
const hhmm = (t) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

function chart(t) {
  const n = t.buckets.length;
  const max = Math.max(1, ...t.buckets.map((b) => b.done + b.failed));
  const top = max <= 5 ? max : Math.ceil(max / 5) * 5;
  const bw = (W - PAD.left - PAD.right) / n;
  const y = (v) => PAD.top + (H - PAD.top - PAD.bottom) * (1 - v / top);
  const done = t.buckets.reduce((s, b) => s + b.done, 0);
  const failed = t.buckets.reduce((s, b) => s + b.failed, 0);
  const busiest = t.buckets.reduce((m, b) => Math.max(m, b.done + b.failed), 0);
  const hours = Math.round((n * t.bucket_ms) / 3600_000);
  const ticks = chartTicks(t.buckets);
  const summary = `Nodes finished per minute over the last ${hours} hours: ${done} done and ${failed} failed in all; the busiest minute had ${busiest}.`;
  return html`<figure class="chart-wrap" id="throughput" data-done-total=${String(done)} data-failed-total=${String(failed)} data-since=${String(t.since)} data-bucket-ms=${String(t.bucket_ms)}>
    <figcaption><strong>Finished per minute</strong>, last ${hours} hours
      <span class="legend-item"><span class="swatch ok-swatch" aria-hidden="true"></span>done</span>
      <span class="legend-item"><span class="swatch fail-swatch" aria-hidden="true"></span>failed</span>
    </figcaption>
    <svg viewBox=${`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label=${summary}>
      ${svg`<line class="axis" x1=${PAD.left} y1=${H - PAD.bottom} x2=${W - PAD.right} y2=${H - PAD.bottom}></line>
      <line class="axis" x1=${PAD.left} y1=${PAD.top} x2=${PAD.left} y2=${H - PAD.bottom}></line>
      <text class="tick" x=${PAD.left - 4} y=${PAD.top + 8} text-anchor="end">${top}</text>
      <text class="tick" x=${PAD.left - 4} y=${H - PAD.bottom} text-anchor="end">0</text>
      ${ticks.map(({ i, start, anchor }) => svg`<text class="tick" x=${PAD.left + i * bw} y=${H - 6} text-anchor=${anchor}>${hhmm(start)}</text>`)}
      ${t.buckets.map((b, i) =>
        b.done + b.failed === 0
          ? ""
          : svg`<g data-minute=${new Date(b.start).toISOString()} data-done=${b.done} data-failed=${b.failed}>
              <rect class="bar-done" x=${PAD.left + i * bw + 0.5} y=${y(b.done)} width=${Math.max(1, bw - 1)} height=${y(0) - y(b.done)}></rect>
              <rect class="bar-failed" x=${PAD.left + i * bw + 0.5} y=${y(b.done + b.failed)} width=${Math.max(1, bw - 1)} height=${y(b.done) - y(b.done + b.failed)}></rect>
            </g>`,
      )}`}
    </svg>
    <details>
      <summary>The figures as a table</summary>
      <table class="data" id="throughput-table">
        <caption class="visually-hidden">Nodes done and failed per minute (minutes with none left out)</caption>
        <thead><tr><th scope="col">minute</th><th scope="col" class="num">done</th><th scope="col" class="num">failed</th></tr></thead>
        <tbody>
          ${t.buckets.filter((b) => b.done + b.failed > 0).map((b) => html`<tr><th scope="row">${hhmm(b.start)}</th><td class="num">${b.done}</td><td class="num">${b.failed}</td></tr>`)}
        </tbody>
      </table>
    </details>
  </figure>`;
}

function view(p) {
  const e = p.eta;
  const counts = p.masters.reduce((c, m) => ({ done: c.done + m.done, failed: c.failed + m.failed }), { done: 0, failed: 0 });
  return html`<section class="progress-page" data-now=${String(p.now)}>
    <h1>Progress</h1>
    <div class="cards-row">
      <div class="stat"><span class="big" id="progress-pending">${e.pending}</span>pending</div>
      <div class="stat"><span class="big" id="progress-in-progress">${e.in_progress}</span>in progress</div>
      <div class="stat"><span class="big">${counts.done}</span>done</div>
      <div class="stat"><span class="big">${counts.failed}</span>failed</div>
      <div class="stat"><span class="big" id="progress-rate" data-rate=${e.rate_per_min == null ? "" : String(e.rate_per_min)}>${e.rate_per_min == null ? "–" : e.rate_per_min.toFixed(1)}</span>finished per minute, last ${Math.round(e.window_s / 60)} min</div>
      <div class="stat"><span class="big" id="progress-eta" data-eta-s=${e.eta_s == null ? "" : String(e.eta_s)}>${formatEta(e.eta_s)}</span>until pending and in-progress nodes are through${e.method === "stages" ? html`<span class="muted">: ${e.concurrency} at a time, about ${formatDuration(e.per_node_s)} a node${e.gone ? `, ${e.gone} gone not counted` : ""}</span>` : e.method === "rate" ? html`<span class="muted">: at the rate of the last ${Math.round(e.window_s / 60)} min</span>` : ""}</div>
    </div>
    ${chart(p.throughput)}
    <h2 id="stages-title">By stage</h2>
    ${p.stages.length === 0
      ? html`<p class="muted">No stage has run yet.</p>`
      : html`<table class="data" id="stage-table" aria-labelledby="stages-title">
          <thead><tr><th scope="col">stage</th><th scope="col" class="num">in flight</th><th scope="col" class="num">completed</th><th scope="col" class="num">p50</th><th scope="col" class="num">p95</th></tr></thead>
          <tbody>
            ${p.stages.map(
              (s) => html`<tr data-stage=${s.stage}><th scope="row">${s.stage}</th><td class="num">${s.in_flight}</td><td class="num">${s.samples}</td><td class="num">${ms(s.p50_ms)}</td><td class="num">${ms(s.p95_ms)}</td></tr>`,
            )}
          </tbody>
        </table>`}
    <h2 id="masters-title">By master</h2>
    ${p.masters.length === 0
      ? html`<p class="muted">No node has a master yet.</p>`
      : html`<table class="data" id="master-table" aria-labelledby="masters-title">
          <thead><tr><th scope="col">master</th><th scope="col" class="num">in flight</th><th scope="col" class="num">done</th><th scope="col" class="num">failed</th><th scope="col" class="num">p50 start to done</th><th scope="col" class="num">p95</th></tr></thead>
          <tbody>
            ${p.masters.map(
              (m) => html`<tr data-master=${m.master}><th scope="row">${m.master || "(none yet)"}</th><td class="num">${m.in_flight}</td><td class="num">${m.done}</td><td class="num">${m.failed}</td><td class="num">${ms(m.p50_ms)}</td><td class="num">${ms(m.p95_ms)}</td></tr>`,
            )}
          </tbody>
        </table>`}
    <p class="muted">From the provisioner's records: each node counts where its latest round is (a node retried after failing counts as pending again). p50 and p95 are nearest-rank percentiles over completed stages; "start to done" is a done node's whole round.</p>
  </section>`;
}

export function mount(el) {
  let alive = true;
  const draw = (p) => alive && p?.throughput && render(view(p), el);
  render(html`<section class="progress-page"><h1>Progress</h1><p class="muted">Loading…</p></section>`, el);
  api
    .get("/api/progress")
    .then(draw)
    .catch((err) => alive && render(html`<section class="progress-page"><h1>Progress</h1><p class="error">${err.code}: ${err.message}</p></section>`, el));
  const stream = liveStream("/api/progress/events", { progress: draw });
  return {
    unmount() {
      alive = false;
      stream.close();
    },
  };
}
