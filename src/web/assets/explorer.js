// The fleet explorer: a filter in muster's own language (the server parses it with the CLI's
// parser, so a bad one comes back with its column), the fact columns the operator picks, and a bar
// chart of counts by a fact's value. Rows load page by page as they scroll into view.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { css } from "./css.js";
import { api, query } from "./api.js";
import { download } from "./download.js";
import { caretLine, cellText, countBars, explorerExport, factCellText, parseColumns, toCsv } from "./model.js";
import { VirtualList } from "./virtual.js";

const ROW_HEIGHT = 28;
// Each page costs the server one registry query over the whole filter, so pages are large and the
// next one is asked for half a page before it scrolls into view.
const PAGE = 500;
const AHEAD = PAGE / 2;

export function mount(el, ctx, route) {
  const state = {
    filter: route.params.filter ?? "",
    columns: parseColumns(route.params.columns ?? "os,country"),
    countBy: route.params.count ?? "",
  };
  let generation = 0; // answers to an older query are dropped
  let total = 0;
  const pages = new Map(); // page index -> rows | "loading"
  let error = null;
  let counts = null;
  let countsError = null;

  render(
    html`<section class="explorer">
      <h1>Fleet</h1>
      <form id="explorer-form" class="filters" autocomplete="off">
        <label class="grow">Filter <span class="muted">(as <code>muster find -S</code>: <code>country=de and puppet_server</code>, <code>/web/</code>, <code>os=debian or not role=db</code>)</span>
          <input id="filter" name="filter" spellcheck="false" .value=${state.filter} placeholder="empty: every node" />
        </label>
        <label>Fact columns <input id="columns" name="columns" spellcheck="false" .value=${state.columns.join(", ")} placeholder="os, country" /></label>
        <label>Count by fact <input id="count-by" name="count" spellcheck="false" .value=${state.countBy} placeholder="os" /></label>
        <button type="submit">Apply</button>
      </form>
      <div class="table-tools">
        <span class="muted">Export the matching nodes with these columns:</span>
        <button type="button" class="secondary" id="explorer-export-csv">Export CSV</button>
        <button type="button" class="secondary" id="explorer-export-json">Export JSON</button>
        <span id="explorer-export-status" class="muted" role="status"></span>
      </div>
      <div id="filter-error" class="filter-error" hidden></div>
      <div id="counts" class="counts"></div>
      <p id="explorer-total" class="summary" role="status"></p>
      <div class="vtable explorer-table" role="table" aria-label="Nodes matching the filter" aria-describedby="explorer-total">
        <div id="explorer-head" class="vhead row" role="row"></div>
        <div id="explorer-rows" class="vport" role="rowgroup"></div>
      </div>
    </section>`,
    el,
  );
  const form = el.querySelector("#explorer-form");
  const errEl = el.querySelector("#filter-error");
  const countsEl = el.querySelector("#counts");
  const totalEl = el.querySelector("#explorer-total");
  const headEl = el.querySelector("#explorer-head");
  const table = el.querySelector(".explorer-table");

  const rowAt = (i) => pages.get(Math.floor(i / PAGE))?.[i % PAGE];
  const row = (i) => {
    const n = rowAt(i);
    if (!n || n === "loading") return html`<div class="row placeholder" role="row"><span class="muted" role="cell">…</span></div>`;
    return html`<div class="row" role="row" data-identity=${n.identity}>
      <span class="ident" role="cell"><a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a></span>
      ${state.columns.map((c) => {
        const t = factCellText(c, n.columns?.[c]);
        return html`<span role="cell" title=${t}>${t}</span>`;
      })}
    </div>`;
  };
  const list = new VirtualList(el.querySelector("#explorer-rows"), ROW_HEIGHT, row, (first, last) => {
    for (let p = Math.floor(first / PAGE); p <= Math.floor(Math.max(first, last - 1 + AHEAD) / PAGE); p++) loadPage(p, generation);
  });

  function setGridColumns() {
    // The grid's columns follow the chosen facts; set through CSSOM, which the CSP allows.
    table.style.setProperty("--cols", `minmax(14em, 2fr) ${state.columns.map(() => "minmax(6em, 1fr)").join(" ")}`);
    render(html`<span role="columnheader">identity</span>${state.columns.map((c) => html`<span role="columnheader">${c}</span>`)}`, headEl);
  }

  async function loadPage(p, gen) {
    if (pages.has(p) || gen !== generation) return;
    if (p > 0 && p * PAGE >= total) return; // past the end (total is known once page 0 answered)
    pages.set(p, "loading");
    try {
      const res = await api.get(`/api/nodes${query({ filter: state.filter, columns: state.columns.join(","), offset: p * PAGE, limit: PAGE })}`);
      if (gen !== generation) return;
      if (p === 0) performance.mark("muster:data"); // for bench/web.ts
      pages.set(p, res.nodes);
      if (res.total !== total) {
        total = res.total;
        list.setTotal(total);
      }
      error = null;
      drawStatus();
      list.schedule();
    } catch (err) {
      if (gen !== generation) return;
      pages.delete(p);
      error = err;
      drawStatus();
    }
  }

  function drawStatus() {
    if (error?.code === "filter") {
      errEl.hidden = false;
      render(
        html`<pre class="caret"><span class="src">${state.filter}</span>
<span class="mark">${caretLine(state.filter, error.column)}</span></pre>
          <p class="error" data-column=${String(error.column ?? "")}>${error.message}</p>`,
        errEl,
      );
      totalEl.textContent = "";
    } else if (error) {
      errEl.hidden = false;
      render(html`<p class="error">${error.code}: ${error.message}</p>`, errEl);
    } else {
      errEl.hidden = true;
      render(html``, errEl);
      totalEl.textContent = `${total} ${total === 1 ? "node matches" : "nodes match"}${state.filter ? ` ${state.filter}` : ""}`;
    }
    // No chart but the one for this query: a bad filter (shown under the box) or one still loading
    // clears the previous query's bars rather than leaving them up as if they were its answer.
    if (!state.countBy || error?.code === "filter") render(html``, countsEl);
    else if (countsError) render(html`<p class="error">${countsError.message}</p>`, countsEl);
    else if (!counts) render(html``, countsEl);
    else
      render(
        html`<h2>Nodes by <code>${counts.fact}</code></h2>
          <div class="chart">
            ${countBars(counts.counts).map(
              (b) => html`<div class="bar-row" data-value=${cellText(b.value)}>
                <span class="label" title=${cellText(b.value)}>${b.value === null || b.value === undefined ? "(unset)" : factCellText(state.countBy, b.value)}</span>
                <span class="bar"><span class="fill" ${css({ width: `${(b.fraction * 100).toFixed(1)}%` })}></span></span>
                <span class="num">${b.count}</span>
              </div>`,
            )}
          </div>`,
        countsEl,
      );
  }

  async function loadCounts(gen) {
    counts = null;
    countsError = null;
    if (!state.countBy) return drawStatus();
    try {
      const res = await api.get(`/api/counts${query({ fact: state.countBy, filter: state.filter })}`);
      if (gen !== generation) return;
      counts = res;
    } catch (err) {
      if (gen !== generation) return;
      // A bad filter is already shown under the box; do not say it twice.
      if (err.code !== "filter") countsError = err;
    }
    drawStatus();
  }

  function apply() {
    generation++;
    pages.clear();
    total = 0;
    error = null;
    list.setTotal(0);
    list.viewport.scrollTop = 0;
    setGridColumns();
    history.replaceState(null, "", `#/explorer${query({ filter: state.filter, columns: state.columns.join(","), count: state.countBy })}`);
    loadPage(0, generation);
    loadCounts(generation);
  }

  const readForm = () => {
    state.filter = form.elements.filter.value.trim();
    state.columns = parseColumns(form.elements.columns.value);
    state.countBy = form.elements.count.value.trim();
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    clearTimeout(typing);
    readForm();
    apply();
  });
  // Answers while the operator types, once they pause: a bad filter's caret follows the typing.
  let typing = 0;
  form.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      const before = JSON.stringify(state);
      readForm();
      if (JSON.stringify(state) !== before) apply();
    }, 400);
  });
  // The whole answer, not only the rows loaded so far: page by page, then one file.
  async function exportView(format) {
    const statusEl = el.querySelector("#explorer-export-status");
    const gen = generation;
    const rows = [];
    try {
      for (let offset = 0; ; offset += 1000) {
        statusEl.textContent = `reading nodes ${offset + 1}…`;
        const res = await api.get(`/api/nodes${query({ filter: state.filter, columns: state.columns.join(","), offset, limit: 1000 })}`);
        if (gen !== generation) return void (statusEl.textContent = "");
        for (const n of res.nodes) rows.push(n);
        if (res.nodes.length === 0 || rows.length >= res.total) break;
      }
    } catch (err) {
      statusEl.textContent = `export failed: ${err.code}: ${err.message}`;
      return;
    }
    const stamp = new Date().toISOString().replace(/[:.]/g, "-");
    // CSV: a structured fact as dotted columns (os.family, os.release.major), never JSON in a cell
    const flat = explorerExport(rows, state.columns);
    if (format === "csv") download(`muster-fleet-${stamp}.csv`, "text/csv", toCsv(flat.rows, flat.columns));
    else download(`muster-fleet-${stamp}.json`, "application/json", `${JSON.stringify(rows.map((n) => ({ identity: n.identity, ...n.columns })), null, 2)}\n`);
    statusEl.textContent = `${rows.length} nodes exported`;
  }
  el.querySelector("#explorer-export-csv").addEventListener("click", () => exportView("csv"));
  el.querySelector("#explorer-export-json").addEventListener("click", () => exportView("json"));
  apply();

  return {
    unmount() {
      generation++;
      clearTimeout(typing);
      list.destroy();
    },
  };
}
