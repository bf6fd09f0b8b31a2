// A node's stages as one bar on the board's common time scale (so rows compare at a glance), the
// running stage striped; its stages and times in words for screen readers and the keyboard (each
// bar is focusable, and the board shows the focused or hovered bar's stages under the table).
import { html } from "/vendor/lit-html/lit-html.js";
import { css } from "./css.js";
import { formatDuration, timelineSegments, timelineText } from "./model.js";

/** The stages' colours as the legend names them: one entry per colour. */
export const STAGE_LEGEND = [
  { label: "lock, unlock", cls: "st-lock" },
  { label: "set_puppet_host", cls: "st-set_puppet_host" },
  { label: "certificate (clean_cert, request_csr, sign_csr)", cls: "st-sign_csr" },
  { label: "bootstrap run", cls: "st-bootstrap" },
  { label: "production run", cls: "st-production" },
  { label: "daemonize", cls: "st-daemonize" },
  { label: "disable, notify", cls: "st-notify" },
];

export function timelineBar(timeline, now = Date.now(), scaleMs = 0, identity = "") {
  const segs = timelineSegments(timeline, now, scaleMs);
  const text = timelineText(timeline, now);
  if (segs.length === 0) return html`<span class="timeline empty" role="img" aria-label="no stages yet"></span>`;
  return html`<span class="timeline" tabindex="0" role="img" aria-label=${`timeline: ${text}`} data-identity=${identity} data-text=${text}>
    ${segs.map((s) => html`<span class=${`seg st-${s.stage}${s.running ? " running" : ""}`} ${css({ width: `${(s.fraction * 100).toFixed(2)}%` })}></span>`)}
  </span>`;
}

export function timelineLegend(scaleMs) {
  return html`<div class="legend" aria-label="timeline legend">
    <span class="legend-title">Timeline${scaleMs ? html`, full width = ${formatDuration(scaleMs / 1000)}` : ""}:</span>
    ${STAGE_LEGEND.map((l) => html`<span class="legend-item"><span class=${`swatch ${l.cls}`} aria-hidden="true"></span>${l.label}</span>`)}
    <span class="legend-item"><span class="swatch running st-production" aria-hidden="true"></span>running now</span>
  </div>`;
}

/** The timeline as a table with durations, for the node page. */
export function timelineTable(timeline, now = Date.now()) {
  const segs = timelineSegments(timeline, now);
  if (segs.length === 0) return html`<p class="muted">No stages yet.</p>`;
  return html`<table class="kv timeline-table">
    <caption class="visually-hidden">Provisioning stages and their durations</caption>
    <thead><tr><th scope="col">stage</th><th scope="col">took</th><th scope="col"><span class="visually-hidden">share of the time</span></th></tr></thead>
    <tbody>
      ${segs.map(
        (s) => html`<tr>
          <th scope="row">${s.stage}</th>
          <td>${formatDuration(s.ms / 1000) || "0ms"}${s.running ? " (running)" : ""}</td>
          <td class="bar-cell"><div class="bar"><span class=${`seg st-${s.stage}`} ${css({ width: `${(s.fraction * 100).toFixed(2)}%` })}></span></div></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}
