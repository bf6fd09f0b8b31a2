// A confirmation for actions that change many things at once: the browser's own modal <dialog>
// (focus moves into it and stays there, Escape cancels), which says exactly what will happen and how
// many nodes it touches. Resolves true only when the operator presses the confirming button.
import { html, render } from "/vendor/lit-html/lit-html.js";

let host = null;

export function confirmAction({ title, body, confirm, danger = false }) {
  if (!host) {
    host = document.createElement("div");
    document.body.append(host);
  }
  return new Promise((resolve) => {
    let settled = false;
    const done = (ok) => {
      if (settled) return;
      settled = true;
      const d = host.querySelector("dialog");
      if (d?.open) d.close();
      render(html``, host);
      resolve(ok);
    };
    render(
      html`<dialog id="confirm-dialog" class="confirm" aria-labelledby="confirm-title" aria-describedby="confirm-body" @cancel=${() => done(false)} @close=${() => done(false)}>
        <h2 id="confirm-title">${title}</h2>
        <div id="confirm-body">${body}</div>
        <div class="dialog-actions">
          <button type="button" class="secondary" id="confirm-cancel" @click=${() => done(false)}>Cancel</button>
          <button type="button" class=${danger ? "danger" : ""} id="confirm-ok" @click=${() => done(true)}>${confirm}</button>
        </div>
      </dialog>`,
      host,
    );
    const d = host.querySelector("dialog");
    d.showModal();
    // the safe choice has the focus: Enter does not start 10,000 Puppet runs
    host.querySelector("#confirm-cancel").focus();
  });
}
