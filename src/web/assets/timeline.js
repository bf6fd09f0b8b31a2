// A node's stages as one bar: each stage's share of the time, the running one striped.
import { html } from "/vendor/lit-html/lit-html.js";
import { css } from "./css.js";
import { formatDuration, timelineSegments } from "./model.js";

export function timelineBar(timeline, now = Date.now()) {
  const segs = timelineSegments(timeline, now);
  if (segs.length === 0) return html`<div class="timeline empty"></div>`;
  const total = segs.reduce((s, x) => s + x.ms, 0);
  return html`<div class="timeline" title=${`${segs.map((s) => `${s.stage} ${formatDuration(s.ms / 1000)}`).join(", ")} (total ${formatDuration(total / 1000)})`}>
    ${segs.map((s) => html`<span class=${`seg st-${s.stage}${s.running ? " running" : ""}`} ${css({ width: `${(s.fraction * 100).toFixed(2)}%` })}></span>`)}
  </div>`;
}

/** The timeline as a list with durations, for the node page. */
export function timelineTable(timeline, now = Date.now()) {
  const segs = timelineSegments(timeline, now);
  if (segs.length === 0) return html`<p class="muted">No stages yet.</p>`;
  return html`<table class="kv timeline-table">
    ${segs.map(
      (s) => html`<tr>
        <th>${s.stage}</th>
        <td>${formatDuration(s.ms / 1000)}${s.running ? " (running)" : ""}</td>
        <td class="bar-cell"><div class="bar"><span class=${`seg st-${s.stage}`} ${css({ width: `${(s.fraction * 100).toFixed(2)}%` })}></span></div></td>
      </tr>`,
    )}
  </table>`;
}
