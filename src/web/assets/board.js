// The provisioning board: every node live from /api/board/events, failed nodes first with their
// log tail and a retry button, a virtual table with a timeline bar per node.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api, liveStream } from "./api.js";
import { boardOrder, elapsedSeconds, formatDuration, matchesFind, statusCounts } from "./model.js";
import { timelineBar } from "./timeline.js";
import { VirtualList } from "./virtual.js";

const ROW_HEIGHT = 30;
/** Failed nodes shown as cards; the rest of them are still first in the table. */
const FAILED_CARDS = 50;

export function mount(el, ctx) {
  const nodes = new Map();
  let sorted = [];
  let dirty = false;
  let live = false;
  let loaded = false;
  const retryMessages = new Map();

  render(
    html`<section class="board">
      <div class="board-head">
        <h1>Provisioning</h1>
        <span id="board-summary" class="summary"></span>
        <span id="board-live" class="live"></span>
        <input id="board-find" class="find" type="search" placeholder="find nodes: name or status" spellcheck="false" autocomplete="off" />
      </div>
      <div id="board-failed"></div>
      <div class="vtable board-table">
        <div class="vhead row"><span>node</span><span>status</span><span>stage</span><span>master</span><span>elapsed</span><span>tries</span><span>timeline</span><span>last error</span></div>
        <div id="board-rows" class="vport"></div>
      </div>
    </section>`,
    el,
  );
  const summaryEl = el.querySelector("#board-summary");
  const findEl = el.querySelector("#board-find");
  let shown = []; // the table's rows: `sorted` narrowed by the find box
  let find = "";
  const liveEl = el.querySelector("#board-live");
  const failedEl = el.querySelector("#board-failed");

  const row = (i) => {
    const n = shown[i];
    if (!n) return html``;
    return html`<div class=${`row status-${n.status}`} data-identity=${n.identity} data-status=${n.status}>
      <span class="ident"><a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a></span>
      <span><span class=${`badge ${n.status}`}>${n.status}</span></span>
      <span>${n.stage ?? ""}</span>
      <span>${n.master ?? ""}</span>
      <span class="num">${formatDuration(elapsedSeconds(n, Date.now()))}</span>
      <span class="num">${n.tries ?? 0}</span>
      <span>${timelineBar(n.timeline)}</span>
      <span class="err" title=${n.last_error ?? ""}>${n.last_error ?? ""}</span>
    </div>`;
  };
  const list = new VirtualList(el.querySelector("#board-rows"), ROW_HEIGHT, row);

  async function retry(identity) {
    retryMessages.set(identity, { pending: true, text: "asking…" });
    drawFailed();
    try {
      await api.post(`/api/board/${encodeURIComponent(identity)}/retry`);
      retryMessages.set(identity, { ok: true, text: "retry requested" });
    } catch (err) {
      retryMessages.set(identity, { ok: false, text: err.status === 403 && err.code === "forbidden" ? `refused: ${err.message}` : `${err.code}: ${err.message}` });
    }
    drawFailed();
  }

  function drawFailed() {
    const failed = sorted.filter((n) => n.status === "failed");
    const shown = failed.slice(0, FAILED_CARDS);
    render(
      failed.length === 0
        ? sorted.length === 0 && loaded
          ? html`<p class="muted empty">No nodes in the provisioning state yet: they show here as soon as a provisioner finds waiting nodes.</p>`
          : html``
        : html`<h2>Failed <span class="count">${failed.length}</span></h2>
            <div class="failed-cards">
              ${shown.map((n) => {
                const msg = retryMessages.get(n.identity);
                return html`<article class="failed-card" data-identity=${n.identity}>
                  <header>
                    <a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a>
                    <span class="muted">stage ${n.stage || "none"}, ${n.tries ?? 0} tries, master ${n.master ?? "none"}</span>
                    <button class="retry" ?disabled=${msg?.pending} title=${ctx.isOperator ? "Provision this node again" : "Retry needs the operator role"} @click=${() => retry(n.identity)}>Retry</button>
                  </header>
                  <p class="err">${n.last_error ?? ""}</p>
                  ${msg ? html`<p class=${`retry-result ${msg.ok ? "ok" : msg.pending ? "muted" : "error"}`}>${msg.text}</p>` : ""}
                  <pre class="logtail">${(n.log_tail ?? []).slice(-8).join("\n")}</pre>
                </article>`;
              })}
            </div>
            ${failed.length > shown.length ? html`<p class="muted">and ${failed.length - shown.length} more failed nodes, first in the table below</p>` : ""}`,
      failedEl,
    );
  }

  function draw() {
    if (dirty) {
      sorted = [...nodes.values()].sort(boardOrder);
      dirty = false;
      const c = statusCounts(sorted);
      summaryEl.textContent = loaded ? `${sorted.length} nodes: ${c.done} done, ${c.in_progress} in progress, ${c.pending} pending, ${c.failed} failed` : "loading…";
      drawFailed();
      shown = find ? sorted.filter((n) => matchesFind(n, find)) : sorted;
      list.setTotal(shown.length);
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
        if (n.removed) nodes.delete(n.identity);
        else nodes.set(n.identity, n);
        retryMessages.delete(n.identity);
        changed();
      },
      health: (h) => ctx.setHealth(h),
    },
    (connected) => {
      live = connected;
      liveEl.textContent = live ? "● live" : "○ reconnecting…";
      liveEl.className = `live ${live ? "on" : "off"}`;
      el.querySelector(".board").dataset.live = String(live);
    },
  );
  findEl.addEventListener("input", () => {
    find = findEl.value.trim();
    changed();
  });
  // Elapsed times of running nodes tick without any event.
  const ticker = setInterval(() => list.schedule(), 1000);

  return {
    unmount() {
      stream.close();
      clearInterval(ticker);
      cancelAnimationFrame(frame);
      list.destroy();
    },
  };
}
