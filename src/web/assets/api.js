// The console's only door to the server: JSON over fetch with the session cookie, the CSRF header
// on every POST, and errors turned into ApiError with the server's {error: {code, message}}.

export class ApiError extends Error {
  constructor(status, code, message, extra = {}) {
    super(message);
    this.status = status;
    this.code = code;
    Object.assign(this, extra);
  }
}

let csrf = "";
const unauthenticatedListeners = new Set();

/** Called when any request answers 401: the session is gone, so the app shows the login form. */
export function onUnauthenticated(fn) {
  unauthenticatedListeners.add(fn);
}

export function setCsrf(token) {
  csrf = token ?? "";
}

async function request(method, path, body) {
  const headers = { accept: "application/json" };
  if (method !== "GET") {
    headers["x-csrf-token"] = csrf;
    headers["content-type"] = "application/json";
  }
  let res;
  try {
    res = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "unreachable", `the console server did not answer (${err.message}); retrying`);
  }
  let data = null;
  const text = await res.text();
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const e = data?.error ?? {};
    const err = new ApiError(res.status, e.code ?? `http_${res.status}`, e.message ?? (text.slice(0, 200) || res.statusText), e);
    if (res.status === 401) for (const fn of unauthenticatedListeners) fn(err);
    throw err;
  }
  return data;
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body = {}) => request("POST", path, body),
};

/** The query string of an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

/**
 * An EventSource that survives the server going away: the browser reconnects by itself after a
 * network error, but gives up for good when the server answers with an error status (as it does
 * while the broker is down), so then we open a new one after a growing pause.
 * @param {string} url
 * @param {Record<string, (data: any) => void>} handlers event name -> handler of the parsed data
 * @param {(connected: boolean) => void} onState
 */
export function liveStream(url, handlers, onState = () => {}) {
  let es = null;
  let stopped = false;
  let delay = 500;
  let timer = null;
  const open = () => {
    if (stopped) return;
    es = new EventSource(url, { withCredentials: true });
    es.onopen = () => {
      delay = 500;
      onState(true);
    };
    es.onerror = () => {
      onState(false);
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        timer = setTimeout(open, delay);
        delay = Math.min(delay * 2, 10_000);
      }
    };
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (ev) => {
        let data;
        try {
          data = JSON.parse(ev.data);
        } catch {
          return; // a garbled event is skipped, the next snapshot or change repairs the view
        }
        fn(data);
      });
    }
  };
  open();
  return {
    close() {
      stopped = true;
      clearTimeout(timer);
      es?.close();
    },
  };
}
