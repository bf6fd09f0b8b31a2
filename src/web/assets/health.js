// The landing page: the site's health at a glance for the one on call. First whether this view
// can see at all (a degraded one says why, and that nobody is marked unreachable meanwhile) and how
// fresh its data is; then the site itself: each service (brokers, masters, provisioners, registry,
// console, notifier) with its role, state, why and checks; then the nodes: counts of unreachable,
// Puppet failed, disabled and stale, provisioning failed and gone, each with its nodes, why, since
// when and a link to the node. Live from /api/health/events (the shell's one stream, shared
// through ctx). Browser notifications of new problems are offered here, opt-in.
import { html, render } from "/vendor/lit-html/lit-html.js";
import { freshSeconds, healthGroups, siteRows } from "./model.js";
import { when } from "./when.js";

const STATE_LABEL = { ok: "ok", warn: "warning", down: "down", unobserved: "not observed", failing: "failing" };

function site(v) {
  const rows = siteRows(v.services);
  const ss = v.service_summary ?? { services: 0, healthy: 0, unhealthy: 0 };
  return html`<section class="site" id="site" aria-labelledby="h-site" data-unhealthy=${String(ss.unhealthy)}>
    <h2 id="h-site">The site <span class="summary" id="site-summary">${ss.services} services: ${ss.healthy} healthy, ${ss.unhealthy} unhealthy</span></h2>
    ${rows.length === 0
      ? html`<p class="muted" id="site-none">No service of the site has reported yet. Provisioners, the registry and the console write their heartbeats to the services bucket, masters and the notifier carry theirs on their nodes' heartbeats, and brokers are listed once the console's <code>health.broker_monitoring</code> names their monitoring ports.</p>`
      : html`<table class="site-table">
          <thead><tr><th scope="col">Service</th><th scope="col">Role</th><th scope="col">Health</th><th scope="col">Why</th></tr></thead>
          <tbody>
            ${rows.map(
              (r) => html`<tr class=${`service state-${r.state}`} data-role=${r.role} data-name=${r.name} data-state=${r.state}>
                <th scope="row">${r.name}</th>
                <td>${r.roleLabel}</td>
                <td><span class=${`badge state-${r.state}`}>${STATE_LABEL[r.state] ?? r.state}</span></td>
                <td>
                  ${r.why}${r.observer ? html` <span class="muted">(as ${r.observer} sees it)</span>` : ""}
                  <details class="checks">
                    <summary>${r.checks.length} check${r.checks.length === 1 ? "" : "s"}, seen ${when(r.lastSeen)}</summary>
                    <ul>${r.checks.map((c) => html`<li class=${`check state-${c.status}`}><strong>${c.name}</strong> (${c.status}): ${c.why}</li>`)}</ul>
                  </details>
                </td>
              </tr>`,
            )}
          </tbody>
        </table>`}
  </section>`;
}

/** The view's own state: degraded (why, since when, what that means) or how fresh it is. */
function viewLine(v) {
  const age = freshSeconds(v.view, v.time, Date.now());
  if (v.view?.degraded) {
    return html`<p class="degraded" id="health-degraded" role="alert">
      <strong>This view cannot see the fleet</strong> since ${when(v.view.since)}: ${v.view.why}. Nobody is marked unreachable for the silence meanwhile, and alerts are held until it can see again.
    </p>`;
  }
  return html`<span class="summary" id="health-fresh" data-age=${String(age ?? "")}>data as of ${age === null ? "unknown" : `${age} s ago`}</span>`;
}

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
    if (!v) return render(html`<section class="health-page"><h1>Site health</h1><p class="muted">Loading…</p></section>`, el);
    const s = v.summary;
    const groups = healthGroups(v.nodes);
    render(
      html`<section class="health-page" data-unhealthy=${String(s.unhealthy)} data-degraded=${String(Boolean(v.view?.degraded))}>
        <div class="board-head">
          <h1>Site health</h1>
          ${v.view?.degraded ? "" : viewLine(v)}
        </div>
        ${v.view?.degraded ? viewLine(v) : ""}
        ${v.problem ? html`<p class="note" id="health-problem">${v.problem}</p>` : ""}
        ${site(v)}
        <h2 id="h-nodes">Nodes <span class="summary" id="health-summary" role="status">${s.nodes} nodes: ${s.healthy} healthy, ${s.unhealthy} unhealthy</span></h2>
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
                  <h3 id=${`h-${g.kind}`} tabindex="-1">${g.label} <span class="count">${g.nodes.length}</span></h3>
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
  // relative times ("12 s ago", "data as of") move on without any event: a stalled feed shows its age
  const ticker = setInterval(draw, 1000);
  return {
    unmount() {
      off();
      clearInterval(ticker);
    },
  };
}
