// Saves text the page made (an export of the current view) as a file: a Blob behind a temporary
// link with `download`, so nothing goes back to the server and the CSP needs no exception.
export function download(filename, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type: `${type};charset=utf-8` }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
