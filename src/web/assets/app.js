// The console's shell: who is logged in, the status banner (broker, registry), the fleet's health
// (one stream for every view: the tab title carries the number of unhealthy nodes, and browser
// notifications, when turned on, tell of new ones), and the hash router that mounts one view at a
// time (each view cleans up its streams when it is left).
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api, liveStream, onUnauthenticated, setCsrf } from "./api.js";
import { newProblems, parseRoute, titleWithProblems } from "./model.js";
import { when } from "./when.js";
import * as healthPage from "./health.js";
import * as board from "./board.js";
import * as explorer from "./explorer.js";
import * as nodePage from "./node.js";
import * as runall from "./runall.js";
import * as progressPage from "./progress.js";
import * as audit from "./audit.js";
import * as alerts from "./alerts.js";

const views = { health: healthPage, board, explorer, node: nodePage, runall, progress: progressPage, audit, alerts };
const TITLES = { health: "Health", board: "Provisioning", explorer: "Fleet", node: "Node", runall: "Puppet runs", progress: "Progress", audit: "Audit", alerts: "Alerts" };
const main = document.getElementById("app");
const statusEl = document.getElementById("status");
const whoEl = document.getElementById("who");
const logoutEl = document.getElementById("logout");

const NOTIFY_KEY = "muster.notifications";
const healthListeners = new Set();

/** Shared with the views: the session, the console's status, and the fleet's health as it arrives. */
const ctx = {
  session: null,
  get isOperator() {
    return ctx.session?.role === "operator";
  },
  setStatus,
  /** {time, view, services, service_summary, summary, nodes (the unhealthy ones), problem} from /api/health/events; null until the first. */
  health: null,
  onHealth(fn) {
    healthListeners.add(fn);
    return () => healthListeners.delete(fn);
  },
  notifications: {
    supported: typeof Notification !== "undefined",
    permission: () => (typeof Notification !== "undefined" ? Notification.permission : "denied"),
    enabled: () => typeof Notification !== "undefined" && Notification.permission === "granted" && localStorage.getItem(NOTIFY_KEY) === "on",
    async toggle() {
      if (ctx.notifications.enabled()) localStorage.removeItem(NOTIFY_KEY);
      else if ((await Notification.requestPermission()) === "granted") localStorage.setItem(NOTIFY_KEY, "on");
      for (const fn of healthListeners) fn(ctx.health);
    },
  },
};

let current = null;
let currentTitle = "muster";
let loggedOut = false;

let lastStatus = null;
let lastUnreachable;

function setStatus(status, unreachable) {
  lastStatus = status;
  lastUnreachable = unreachable;
  const problems = [];
  if (unreachable) problems.push(`The console server is unreachable: ${unreachable}. Reconnecting…`);
  // on every page: a view that cannot see says so, so no page passes its silence off as nodes gone
  const view = ctx.health?.view;
  if (view?.degraded) problems.push(`The console cannot see the fleet right now: ${view.why}. Nobody is marked unreachable meanwhile, and alerts are held.`);
  if (status?.broker && !status.broker.ok) problems.push(`The broker is down: ${status.broker.error ?? "not connected"}. Live updates resume when it is back.`);
  if (status?.registry && !status.registry.ok) problems.push(`The registry is unavailable: ${status.registry.error ?? "no answer"}. The fleet explorer will work again when it is back.`);
  if (status?.alerts && !status.alerts.ok) problems.push(html`Alerts are not reaching the admins${status.alerts.since ? html` (since ${when(status.alerts.since)})` : ""}: ${status.alerts.error}. <a href="#/alerts">Alerts</a>`);
  statusEl.hidden = problems.length === 0;
  render(html`${problems.map((p) => html`<div>${p}</div>`)}`, statusEl);
}

async function pollStatus() {
  if (loggedOut) return;
  try {
    setStatus(await api.get("/api/status"));
  } catch (err) {
    if (err.status !== 401) setStatus(null, err.message);
  }
}

function showTitle() {
  document.title = titleWithProblems(currentTitle, (ctx.health?.summary?.unhealthy ?? 0) + (ctx.health?.service_summary?.unhealthy ?? 0));
}

/** A freshness event: the view's state and time move on even when no problem changed. */
function onFresh(f) {
  if (!ctx.health) return;
  const was = ctx.health.view?.degraded;
  ctx.health = { ...ctx.health, time: f.time, view: f.view };
  if (was !== f.view?.degraded) setStatus(lastStatus, lastUnreachable);
  for (const fn of healthListeners) fn(ctx.health);
}

function onHealth(view) {
  const fresh = ctx.health ? newProblems(ctx.health.nodes, view.nodes) : [];
  const was = ctx.health?.view?.degraded;
  ctx.health = view;
  if (was !== view.view?.degraded) setStatus(lastStatus, lastUnreachable);
  showTitle();
  if (ctx.notifications.enabled()) {
    for (const p of fresh.slice(0, 5)) new Notification(`muster: ${p.identity}`, { body: p.why, tag: `muster-${p.identity}-${p.kind}` });
  }
  for (const fn of healthListeners) fn(view);
}

/** Each view renders into its own new element: lit-html keeps state on a container, so none is reused. */
function freshHost() {
  const host = document.createElement("div");
  main.replaceChildren(host);
  return host;
}

function showLogin(message) {
  loggedOut = true;
  current?.unmount?.();
  current = null;
  whoEl.textContent = "";
  logoutEl.hidden = true;
  render(
    html`<form class="login" method="post" action="/login" aria-labelledby="login-title">
      <h1 id="login-title">Log in to the muster console</h1>
      ${message ? html`<p class="error">${message}</p>` : ""}
      <p class="muted">Paste a token from the console's tokens file (<code>auth.tokens_file</code>).</p>
      <input type="hidden" name="next" .value=${location.hash.startsWith("#/") ? location.hash : ""} />
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="current-password" required autofocus />
      <button type="submit">Log in</button>
    </form>`,
    freshHost(),
  );
}

let routed = false;

function route() {
  if (loggedOut) return;
  const r = parseRoute(location.hash);
  const name = views[r.view] ? r.view : "health";
  for (const a of document.querySelectorAll("#nav a")) {
    const here = a.dataset.view === name || (name === "node" && a.dataset.view === "explorer");
    a.classList.toggle("active", here);
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  currentTitle = `${TITLES[name]}${r.arg ? ` ${r.arg}` : ""} · muster`;
  showTitle();
  current?.unmount?.();
  current = views[name].mount(freshHost(), ctx, r);
  // After following a link, the keyboard and screen readers start at the new page, not the old link.
  if (routed) main.focus({ preventScroll: true });
  routed = true;
}

async function start() {
  onUnauthenticated(() => showLogin("Your session has ended; log in again."));
  try {
    ctx.session = await api.get("/api/session");
  } catch (err) {
    if (err.status === 401) return showLogin();
    render(html`<p class="error">Cannot load the session: ${err.message}</p>`, freshHost());
    setTimeout(start, 2000);
    return;
  }
  setCsrf(ctx.session.csrf);
  whoEl.textContent = `${ctx.session.name} (${ctx.session.role})`;
  whoEl.dataset.role = ctx.session.role;
  document.body.dataset.role = ctx.session.role;
  for (const a of document.querySelectorAll("#nav a[data-role=operator]")) a.hidden = ctx.session.role !== "operator";
  // Only a browser session can be ended here: a token sent as a header or a client certificate has none.
  logoutEl.hidden = ctx.session.via !== "session";
  logoutEl.addEventListener("click", async () => {
    try {
      await api.post("/logout");
    } finally {
      location.assign("/");
    }
  });
  window.addEventListener("hashchange", route);
  liveStream("/api/health/events", { health: onHealth, fresh: onFresh, status: (s) => setStatus(s) });
  route();
  pollStatus();
  // The status also arrives on the streams; polling covers a dead stream.
  setInterval(pollStatus, 5000);
}

start();
