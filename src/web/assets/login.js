// The login page's one script: the fragment of the address the browser was sent to (a deep link
// such as #/node/web01) goes with the form, so after logging in the console opens that page and
// not the board. Browsers never send the fragment to the server by themselves.
const next = document.getElementById("next");
if (next && location.hash.startsWith("#/")) next.value = location.hash;
