// The provisioning board: every node live from /api/board/events. What needs someone comes first:
// failed nodes grouped by cause (one card per cause, with a retry for the whole group or one
// master's share of it), then nodes the provisioner found gone and nodes stuck on a stage for longer
// than it usually takes. Then a virtual table of every node, sortable, narrowed by a find box (both
// kept in the address), with a timeline bar per node on one time scale, and CSV/JSON export of what
// the table shows.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api, liveStream } from "./api.js";
import { confirmAction } from "./dialog.js";
import { download } from "./download.js";
import {
  BOARD_EXPORT_COLUMNS,
  BOARD_SORTS,
  boardExportRows,
  boardStatus,
  elapsedSeconds,
  formatDuration,
  formatEta,
  matchesFind,
  routeHash,
  sortBoard,
  statusCounts,
  stuckInfo,
  timelineScale,
  toCsv,
  unreachableSet,
} from "./model.js";
import { timelineBar, timelineLegend } from "./timeline.js";
import { VirtualList } from "./virtual.js";
import { when } from "./when.js";

const ROW_HEIGHT = 30;
/** Nodes listed by name inside a group's card; the rest are counted (all are in the table, and in the export). */
const GROUP_NODES_SHOWN = 200;
const ATTENTION_SHOWN = 100;

const COLUMNS = [
  { key: "identity", label: "node" },
  { key: "status", label: "status" },
  { key: "stage", label: "stage" },
  { key: "master", label: "master" },
  { key: "elapsed", label: "elapsed" },
  { key: "tries", label: "tries" },
  { key: null, label: "timeline" },
  { key: null, label: "last error" },
];

export function mount(el, ctx, route) {
  const nodes = new Map();
  let sorted = [];
  let shown = []; // the table's rows: sorted, narrowed by the find box
  let groups = [];
  let progress = null;
  let dirty = false;
  let loaded = false;
  let scale = 0;
  let find = route.params.find ?? "";
  let sort = BOARD_SORTS.includes(route.params.sort) ? route.params.sort : "status";
  let dir = route.params.dir === "desc" ? "desc" : "asc";
  // the provisioner's record says how provisioning went; whether the node still answers is health's
  let unreachable = unreachableSet(ctx.health?.nodes);
  const groupMessages = new Map(); // group id -> {ok, text}
  const nodeMessages = new Map(); // identity -> {ok, text}: a gone node's retry or forget
  const operator = ctx.isOperator;
  const roleNote = `Retrying needs the operator role; you are signed in as ${ctx.session?.name ?? "?"} (${ctx.session?.role ?? "viewer"}).`;

  render(
    html`<section class="board">
      <div class="board-head">
        <h1>Provisioning</h1>
        <span id="board-summary" class="summary" role="status"></span>
        <span id="board-eta" class="summary"></span>
        <span id="board-live" class="live"></span>
      </div>
      <div id="board-failures"></div>
      <div id="board-attention"></div>
      <div class="table-tools">
        <label for="board-find" class="inline-label">Find</label>
        <input id="board-find" class="find" type="search" placeholder="part of a name, or a status, stage or master" spellcheck="false" autocomplete="off" .value=${find} />
        <span id="board-shown" class="muted"></span>
        <span class="spacer"></span>
        <button type="button" class="secondary" id="board-export-csv">Export CSV</button>
        <button type="button" class="secondary" id="board-export-json">Export JSON</button>
      </div>
      <div id="board-legend"></div>
      <div class="vtable board-table" role="table" aria-label="Every node the provisioner knows" aria-describedby="board-shown">
        <div class="vhead row" role="row" id="board-head"></div>
        <div id="board-rows" class="vport" role="rowgroup"></div>
      </div>
      <p id="timeline-detail" class="timeline-detail" aria-live="polite"></p>
    </section>`,
    el,
  );
  const $ = (sel) => el.querySelector(sel);
  const summaryEl = $("#board-summary");
  const etaEl = $("#board-eta");
  const findEl = $("#board-find");
  const shownEl = $("#board-shown");
  const liveEl = $("#board-live");
  const failuresEl = $("#board-failures");
  const attentionEl = $("#board-attention");
  const legendEl = $("#board-legend");
  const headEl = $("#board-head");
  const detailEl = $("#timeline-detail");

  const stages = () => progress?.stages ?? [];

  function drawHead() {
    render(
      COLUMNS.map((c) => {
        if (!c.key) return html`<span role="columnheader">${c.label}</span>`;
        const active = sort === c.key || (c.key === "status" && sort === "status");
        const ariaSort = active ? (dir === "asc" ? "ascending" : "descending") : "none";
        return html`<span role="columnheader" aria-sort=${ariaSort}
          ><button type="button" class="sort" data-sort=${c.key} @click=${() => setSort(c.key)}
            >${c.label}<span aria-hidden="true">${active ? (dir === "asc" ? " ▲" : " ▼") : ""}</span></button
          ></span>`;
      }),
      headEl,
    );
  }

  function setSort(key) {
    if (sort === key) dir = dir === "asc" ? "desc" : "asc";
    else [sort, dir] = [key, "asc"];
    keepInUrl();
    drawHead();
    dirty = true;
    changed();
  }

  function keepInUrl() {
    history.replaceState(null, "", routeHash("board", undefined, { find, sort: sort === "status" ? "" : sort, dir: dir === "asc" ? "" : dir }));
  }

  const row = (i) => {
    const n = shown[i];
    if (!n) return html``;
    const now = Date.now();
    const stuck = stuckInfo(n, stages(), now);
    const st = boardStatus(n, unreachable);
    return html`<div class=${`row status-${n.status}${n.gone ? " is-gone" : ""}`} role="row" data-identity=${n.identity} data-status=${n.status} data-gone=${n.gone ? "true" : "false"} data-waiting=${n.waiting ? "true" : "false"} data-stuck=${stuck ? "true" : "false"} data-unreachable=${String(st.unreachable)}>
      <span class="ident" role="cell"><a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a></span>
      <span role="cell" class="status-cell"><span class=${`badge ${n.status}`}>${n.status}</span>${st.unreachable ? html` <span class="badge unreachable">unreachable</span>` : ""}${n.gone ? html` <span class="badge gone">gone</span>` : n.waiting ? html` <span class="badge waiting">waiting</span>` : stuck ? html` <span class="badge stuck">stuck</span>` : ""}</span>
      <span role="cell">${n.stage ?? ""}</span>
      <span role="cell">${n.master ?? ""}</span>
      <span class="num" role="cell">${formatDuration(elapsedSeconds(n, now))}</span>
      <span class="num" role="cell">${n.tries ?? 0}</span>
      <span role="cell" class="tl-cell">${timelineBar(n.timeline, now, scale, n.identity)}</span>
      <span class="err" role="cell" title=${n.last_error ?? ""}>${n.gone ? `gone: ${n.gone.reason}` : n.waiting ? n.waiting.reason : (n.last_error ?? "")}</span>
    </div>`;
  };
  const list = new VirtualList($("#board-rows"), ROW_HEIGHT, row);

  // The focused or hovered timeline's stages in words, under the table: no tooltip the keyboard cannot reach.
  const showDetail = (ev) => {
    const t = ev.target.closest?.(".timeline[data-identity]");
    if (t) detailEl.textContent = `${t.dataset.identity}: ${t.dataset.text}`;
  };
  $("#board-rows").addEventListener("focusin", showDetail);
  $("#board-rows").addEventListener("mouseover", showDetail);

  async function retryGroup(g, master) {
    const count = master === undefined ? g.count : (g.masters.find((m) => m.master === master)?.count ?? 0);
    const whose = master === undefined ? "" : ` of master ${master || "(none)"}`;
    const ok = await confirmAction({
      title: `Retry ${count} failed ${count === 1 ? "node" : "nodes"}${whose}?`,
      body: html`<p>Every node${whose} that failed at <code>${g.stage || "(no stage)"}</code> with</p>
        <p><code class="reason">${g.reason}</code></p>
        <p>goes back to pending, and the provisioner starts it over at its next cycle. A node that changed meanwhile is left alone.</p>`,
      confirm: `Retry ${count} ${count === 1 ? "node" : "nodes"}`,
    });
    if (!ok) return;
    groupMessages.set(g.id, { pending: true, text: "asking…" });
    drawFailures();
    try {
      const res = await api.post("/api/failures/retry", master === undefined ? { group: g.id } : { group: g.id, master });
      groupMessages.set(g.id, { ok: true, text: `${res.retried} queued for provisioning${res.changed ? `, ${res.changed} changed meanwhile and left alone` : ""}` });
    } catch (err) {
      groupMessages.set(g.id, { ok: false, text: err.code === "forbidden" ? `refused: ${err.message}` : `${err.code}: ${err.message}` });
    }
    drawFailures();
  }

  /** A gone node: retried now (rather than after the provisioner's wait), or forgotten. */
  async function goneAction(n, what) {
    const retry = what === "retry";
    const ok = await confirmAction({
      title: retry ? `Retry ${n.identity} now?` : `Forget ${n.identity}?`,
      body: retry
        ? html`<p>The provisioner stops waiting for it to come back: it goes back to pending and is started over at the next cycle.</p>`
        : html`<p>Its provisioning record and its last heartbeat are dropped: it leaves the board and fleet health. Should it wait again, it is provisioned afresh.</p>`,
      confirm: retry ? "Retry now" : "Forget",
      danger: !retry,
    });
    if (!ok) return;
    try {
      await api.post(`/api/board/${encodeURIComponent(n.identity)}/${retry ? "retry" : "forget"}`);
      nodeMessages.set(n.identity, { ok: true, text: retry ? "retry requested" : "forgotten" });
    } catch (err) {
      nodeMessages.set(n.identity, { ok: false, text: `${err.code}: ${err.message}` });
    }
    drawAttention();
  }

  const retryButton = (label, onClick, cls, note = "role-note") =>
    operator
      ? html`<button type="button" class=${cls} @click=${onClick}>${label}</button>`
      : html`<button type="button" class=${cls} disabled aria-describedby=${note}>${label}</button>`;

  function drawFailures() {
    const total = groups.reduce((n, g) => n + g.count, 0);
    if (groups.length === 0) {
      render(
        sorted.length === 0 && loaded ? html`<p class="muted empty">No nodes in the provisioning state yet: they show here as soon as a provisioner finds waiting nodes.</p>` : html``,
        failuresEl,
      );
      return;
    }
    render(
      html`<h2>Failed <span class="count">${total}</span> <span class="muted">${groups.length === 1 ? "one cause" : `${groups.length} causes`}</span></h2>
        ${operator ? "" : html`<p class="note" id="role-note">${roleNote}</p>`}
        <div class="group-cards">
          ${groups.map((g) => {
            const msg = groupMessages.get(g.id);
            const more = g.nodes.length - GROUP_NODES_SHOWN;
            return html`<article class="group-card" data-group=${g.id} data-stage=${g.stage} data-count=${String(g.count)} aria-labelledby=${`g-${g.id}`}>
              <h3 id=${`g-${g.id}`}><span class="count">${g.count}</span> failed at <code>${g.stage || "(no stage)"}</code></h3>
              <p class="reason"><code>${g.reason}</code></p>
              <div class="masters">
                <span class="muted">Masters:</span>
                ${g.masters.map(
                  (m) => html`<span class="master" data-master=${m.master}
                    >${m.master || "(none yet)"} <span class="muted">${m.count}</span>
                    ${g.masters.length > 1 ? retryButton(html`Retry these ${m.count}<span class="visually-hidden"> nodes of ${m.master || "no master"}</span>`, () => retryGroup(g, m.master), "small secondary retry-master") : ""}</span
                  >`,
                )}
              </div>
              <details class="example">
                <summary>Example: ${g.example.identity}</summary>
                <p class="err">${g.example.last_error}</p>
                <pre class="logtail" tabindex="0" role="region" aria-label=${`log tail of ${g.example.identity}`}>${g.example.log_tail.join("\n")}</pre>
              </details>
              <details class="group-nodes">
                <summary>The ${g.count} ${g.count === 1 ? "node" : "nodes"}</summary>
                <ul class="tags">
                  ${g.nodes.slice(0, GROUP_NODES_SHOWN).map((id) => html`<li><a href=${`#/node/${encodeURIComponent(id)}`}>${id}</a></li>`)}
                </ul>
                ${more > 0 ? html`<p class="muted">and ${more} more: find them in the table (<code>${g.stage}</code>, status failed) or export it</p>` : ""}
              </details>
              <div class="actions">
                ${retryButton(`Retry ${g.count} ${g.count === 1 ? "node" : "nodes"}`, () => retryGroup(g), "retry-group")}
                ${msg ? html`<span class=${`retry-result ${msg.ok ? "ok" : msg.pending ? "muted" : "error"}`} role="status">${msg.text}</span>` : ""}
              </div>
            </article>`;
          })}
        </div>`,
      failuresEl,
    );
  }

  function drawAttention() {
    const now = Date.now();
    const gone = [];
    const stuck = [];
    for (const n of sorted) {
      if (n.gone) gone.push(n);
      else {
        const s = stuckInfo(n, stages(), now);
        if (s) stuck.push({ n, s });
      }
    }
    if (gone.length + stuck.length === 0) return render(html``, attentionEl);
    for (const id of nodeMessages.keys()) if (!gone.some((n) => n.identity === id)) nodeMessages.delete(id);
    const items = [
      ...gone.map((n) => {
        const msg = nodeMessages.get(n.identity);
        return html`<li class="attention gone" data-identity=${n.identity} data-kind="gone">
          <span class="badge gone">gone</span> <a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a>
          since ${when(n.gone.since, now)}, at ${n.stage || "no stage"}: ${n.gone.reason}
          <span class="actions">
            ${retryButton(html`Retry now<span class="visually-hidden"> ${n.identity}</span>`, () => goneAction(n, "retry"), "small retry-now", "gone-role-note")}
            ${retryButton(html`Forget<span class="visually-hidden"> ${n.identity}</span>`, () => goneAction(n, "forget"), "small secondary forget", "gone-role-note")}
            ${msg ? html`<span class=${msg.ok ? "ok" : "error"} role="status">${msg.text}</span>` : ""}
          </span>
        </li>`;
      }),
      ...stuck.map(
        ({ n, s }) =>
          html`<li class="attention stuck" data-identity=${n.identity} data-kind="stuck">
            <span class="badge stuck">stuck</span> <a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a>
            on <code>${s.stage}</code> for ${formatDuration(s.for_ms / 1000)} (it usually takes up to ${formatDuration(s.usual_ms / 1000)}), master ${n.master ?? "none"}
          </li>`,
      ),
    ];
    render(
      html`<h2>Gone or stuck <span class="count warn">${gone.length + stuck.length}</span></h2>
        ${gone.length && !operator ? html`<p class="note" id="gone-role-note">Retrying or forgetting a gone node needs the operator role; you are signed in as ${ctx.session?.name ?? "?"} (${ctx.session?.role ?? "viewer"}).</p>` : ""}
        <ul class="attention-list">
          ${items.slice(0, ATTENTION_SHOWN)}
        </ul>
        ${items.length > ATTENTION_SHOWN ? html`<p class="muted">and ${items.length - ATTENTION_SHOWN} more</p>` : ""}`,
      attentionEl,
    );
  }

  function drawEta() {
    if (!progress) return;
    const e = progress.eta;
    const how = e.method === "stages" ? ` (${e.concurrency} at a time, about ${formatDuration(e.per_node_s)} a node)` : e.rate_per_min ? ` at ${e.rate_per_min.toFixed(1)} nodes/min` : "";
    etaEl.textContent = e.pending + e.in_progress === 0 ? "" : `ETA ${formatEta(e.eta_s)}${how}${e.gone ? `; ${e.gone} gone, not waited for` : ""}`;
  }

  function draw() {
    if (dirty) {
      dirty = false;
      const all = [...nodes.values()];
      sorted = sortBoard(all, "status", "asc");
      const c = statusCounts(sorted);
      const goneCount = sorted.filter((n) => n.gone).length;
      const downCount = sorted.filter((n) => unreachable.has(n.identity)).length;
      summaryEl.textContent = loaded ? `${sorted.length} nodes: ${c.done} done, ${c.in_progress} in progress, ${c.pending} pending, ${c.failed} failed${goneCount ? `, ${goneCount} gone` : ""}${downCount ? `; ${downCount} unreachable now` : ""}` : "loading…";
      const narrowed = find ? all.filter((n) => matchesFind(n, find)) : all;
      shown = sortBoard(narrowed, sort, dir);
      shownEl.textContent = find ? `${shown.length} of ${sorted.length} shown` : "";
      scale = timelineScale(shown, Date.now());
      render(timelineLegend(scale), legendEl);
      list.setTotal(shown.length);
      drawFailures();
      drawAttention();
    }
    list.schedule();
  }

  // Changes arrive one node at a time; sorting 10,000 nodes on every one would waste frames, so
  // they are folded into one redraw per animation frame.
  let frame = 0;
  const changed = () => {
    dirty = true;
    if (!frame) frame = requestAnimationFrame(() => ((frame = 0), draw()));
  };

  const stream = liveStream(
    "/api/board/events",
    {
      snapshot: (data) => {
        // For bench/web.ts: when the data arrived, apart from when it was drawn.
        performance.mark("muster:data");
        nodes.clear();
        for (const n of data.nodes ?? []) nodes.set(n.identity, n);
        loaded = true;
        changed();
      },
      node: (n) => {
        if (!n?.identity) return;
        nodes.set(n.identity, n);
        changed();
      },
      remove: (d) => {
        if (d?.identity && nodes.delete(d.identity)) changed();
      },
      failures: (d) => {
        groups = Array.isArray(d?.groups) ? d.groups : [];
        for (const id of groupMessages.keys()) if (!groups.some((g) => g.id === id)) groupMessages.delete(id);
        drawFailures();
      },
      progress: (p) => {
        progress = p;
        drawEta();
        drawAttention();
      },
      status: (s) => ctx.setStatus(s),
    },
    (connected) => {
      liveEl.textContent = connected ? "● live" : "○ reconnecting…";
      liveEl.className = `live ${connected ? "on" : "off"}`;
      $(".board").dataset.live = String(connected);
    },
  );
  const offHealth = ctx.onHealth((v) => {
    const next = unreachableSet(v?.nodes);
    if (next.size === unreachable.size && [...next].every((id) => unreachable.has(id))) return;
    unreachable = next;
    changed();
  });
  let typing = 0;
  findEl.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      find = findEl.value.trim();
      keepInUrl();
      changed();
    }, 150);
  });
  const exportView = (format) => {
    const rows = boardExportRows(shown, stages(), Date.now());
    const stamp = new Date().toISOString().replace(/[:.]/g, "-");
    if (format === "csv") download(`muster-board-${stamp}.csv`, "text/csv", toCsv(rows, BOARD_EXPORT_COLUMNS));
    else download(`muster-board-${stamp}.json`, "application/json", `${JSON.stringify(rows, null, 2)}\n`);
  };
  $("#board-export-csv").addEventListener("click", () => exportView("csv"));
  $("#board-export-json").addEventListener("click", () => exportView("json"));
  drawHead();
  // Elapsed times of running nodes tick without any event; stuck nodes are noticed by the clock too.
  const ticker = setInterval(() => list.schedule(), 1000);
  const attentionTicker = setInterval(drawAttention, 5000);

  return {
    unmount() {
      offHealth();
      stream.close();
      clearInterval(ticker);
      clearInterval(attentionTicker);
      clearTimeout(typing);
      cancelAnimationFrame(frame);
      list.destroy();
    },
  };
}
