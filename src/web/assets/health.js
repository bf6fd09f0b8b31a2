// The landing page: the fleet's health at a glance for the one on call. Counts of unreachable
// nodes, Puppet failed, disabled and stale, provisioning failed and gone, each with its nodes, why,
// since when and a link to the node; live from /api/health/events (the shell's one stream, shared
// through ctx). Browser notifications of new problems are offered here, opt-in.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { healthGroups } from "./model.js";
import { when } from "./when.js";

const SHOWN = 200;

function notificationControl(ctx) {
  if (!ctx.notifications.supported) return html`<p class="muted" id="notify-state">This browser cannot show notifications.</p>`;
  const on = ctx.notifications.enabled();
  const denied = ctx.notifications.permission() === "denied";
  return html`<p class="notify" id="notify-state">
    ${on ? html`Browser notifications are on: a node that becomes unhealthy pops up while this tab is open.` : denied ? html`Notifications are blocked for this site in the browser's settings.` : html`Get a browser notification when a node becomes unhealthy (while this tab is open).`}
    ${denied ? "" : html`<button type="button" class="secondary small" id="notify-toggle" @click=${() => ctx.notifications.toggle()}>${on ? "Turn notifications off" : "Turn notifications on"}</button>`}
  </p>`;
}

export function mount(el, ctx) {
  const draw = () => {
    const v = ctx.health;
    if (!v) return render(html`<section class="health-page"><h1>Fleet health</h1><p class="muted">Loading…</p></section>`, el);
    const s = v.summary;
    const groups = healthGroups(v.nodes);
    render(
      html`<section class="health-page" data-unhealthy=${String(s.unhealthy)}>
        <div class="board-head">
          <h1>Fleet health</h1>
          <span class="summary" id="health-summary" role="status">${s.nodes} nodes: ${s.healthy} healthy, ${s.unhealthy} unhealthy</span>
          <span class="summary">as of ${when(v.time)}</span>
        </div>
        ${v.problem ? html`<p class="note" id="health-problem">${v.problem}</p>` : ""}
        <ul class="cards-row health-counts" aria-label="Problems by kind">
          ${groups.map(
            (g) => html`<li class=${`stat ${g.nodes.length ? "bad" : "good"}`} data-kind=${g.kind} data-count=${String(g.nodes.length)}>
              <a href=${`#/health?kind=${g.kind}`} @click=${(e) => jump(e, g.kind)}><span class="big">${g.nodes.length}</span> ${g.label}</a>
            </li>`,
          )}
        </ul>
        ${notificationControl(ctx)}
        ${s.unhealthy === 0
          ? html`<p class="all-good" id="health-ok">${s.nodes ? `All ${s.nodes} nodes are healthy: every one sends its heartbeat, and none has Puppet or provisioning in trouble.` : "No nodes known yet: they show here once they send heartbeats, register or are provisioned."}</p>`
          : groups
              .filter((g) => g.nodes.length)
              .map(
                (g) => html`<section class="health-kind" id=${`health-${g.kind}`} aria-labelledby=${`h-${g.kind}`} data-kind=${g.kind}>
                  <h2 id=${`h-${g.kind}`} tabindex="-1">${g.label} <span class="count">${g.nodes.length}</span></h2>
                  <ul class="attention-list">
                    ${g.nodes.slice(0, SHOWN).map(
                      (n) => html`<li class=${`attention kind-${g.kind}`} data-identity=${n.identity}>
                        <a href=${`#/node/${encodeURIComponent(n.identity)}`}>${n.identity}</a>: ${n.why}${n.since ? html` <span class="muted">(since ${when(n.since)})</span>` : ""}
                      </li>`,
                    )}
                  </ul>
                  ${g.nodes.length > SHOWN ? html`<p class="muted">and ${g.nodes.length - SHOWN} more (<code>muster health --json</code> lists them all)</p>` : ""}
                </section>`,
              )}
      </section>`,
      el,
    );
  };
  const jump = (e, kind) => {
    const target = el.querySelector(`#h-${kind}`);
    if (!target) return;
    e.preventDefault();
    target.scrollIntoView({ block: "start" });
    target.focus({ preventScroll: true });
  };
  const off = ctx.onHealth(draw);
  draw();
  // relative times ("12 s ago") move on without any event
  const ticker = setInterval(draw, 5000);
  return {
    unmount() {
      off();
      clearInterval(ticker);
    },
  };
}
