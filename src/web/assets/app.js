// The console's shell: who is logged in, the health banner, and the hash router that mounts one
// view at a time (each view cleans up its streams when it is left).
import { html, render } from "/vendor/lit-html/lit-html.js";
import { api, onUnauthenticated, setCsrf } from "./api.js";
import { parseRoute } from "./model.js";
import * as board from "./board.js";
import * as explorer from "./explorer.js";
import * as nodePage from "./node.js";
import * as runall from "./runall.js";
import * as progressPage from "./progress.js";
import * as audit from "./audit.js";

const views = { board, explorer, node: nodePage, runall, progress: progressPage, audit };
const TITLES = { board: "Provisioning", explorer: "Fleet", node: "Node", runall: "Puppet runs", progress: "Progress", audit: "Audit" };
const main = document.getElementById("app");
const healthEl = document.getElementById("health");
const whoEl = document.getElementById("who");
const logoutEl = document.getElementById("logout");

/** Shared with the views: the session and a way to report health from a live stream. */
const ctx = {
  session: null,
  get isOperator() {
    return ctx.session?.role === "operator";
  },
  setHealth,
};

let current = null;
let loggedOut = false;

function setHealth(health, unreachable) {
  const problems = [];
  if (unreachable) problems.push(`The console server is unreachable: ${unreachable}. Reconnecting…`);
  if (health?.broker && !health.broker.ok) problems.push(`The broker is down: ${health.broker.error ?? "not connected"}. Live updates resume when it is back.`);
  if (health?.registry && !health.registry.ok) problems.push(`The registry is unavailable: ${health.registry.error ?? "no answer"}. The fleet explorer will work again when it is back.`);
  healthEl.hidden = problems.length === 0;
  render(html`${problems.map((p) => html`<div>${p}</div>`)}`, healthEl);
}

async function pollHealth() {
  if (loggedOut) return;
  try {
    setHealth(await api.get("/api/health"));
  } catch (err) {
    if (err.status !== 401) setHealth(null, err.message);
  }
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
  const name = views[r.view] ? r.view : "board";
  for (const a of document.querySelectorAll("#nav a")) {
    const here = a.dataset.view === name || (name === "node" && a.dataset.view === "explorer");
    a.classList.toggle("active", here);
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${TITLES[name]}${r.arg ? ` ${r.arg}` : ""} · muster`;
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
  route();
  pollHealth();
  // Health also arrives on the board's stream; polling covers the other views and a dead stream.
  setInterval(pollHealth, 5000);
}

start();
