// One way to show a time everywhere: how long ago (or until), with the full local time (and the
// zone) on hover and to screen readers through the <time> element's title and datetime.
import { html } from "/vendor/lit-html/lit-html.js";
import { formatRelative, localTime } from "./model.js";

/** `ms` (epoch) or an ISO string as "3 min ago", the exact time on hover. */
export function when(t, now = Date.now()) {
  const ms = typeof t === "string" ? Date.parse(t) : t;
  if (ms == null || !Number.isFinite(ms)) return html`<span class="muted">never</span>`;
  return html`<time datetime=${new Date(ms).toISOString()} title=${localTime(ms)}>${formatRelative(ms, now)}</time>`;
}
