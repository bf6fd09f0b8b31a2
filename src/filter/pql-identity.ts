import { FilterError } from "./error.js";

// `-I 'pql:QUERY'`: an identity that is a PuppetDB query (Choria's spelling), answered by
// --dm puppetdb alone (src/puppetdb/discover.ts runs it); every other discovery refuses it.

/** What starts an identity that is a PuppetDB query. */
export const PQL_PREFIX = "pql:";

/** The query of a `pql:` identity, or undefined for an ordinary one. */
export function pqlQueryOf(identity: string): string | undefined {
  return identity.startsWith(PQL_PREFIX) ? identity.slice(PQL_PREFIX.length).trim() : undefined;
}

/** A `pql:` identity checked (a query, no control characters but line breaks and tabs), or undefined for another identity. */
export function checkPqlIdentity(text: string): string | undefined {
  const trimmed = text.trim();
  if (!trimmed.startsWith(PQL_PREFIX)) return undefined;
  if (pqlQueryOf(trimmed) === "") throw new FilterError("expected a PuppetDB query after 'pql:'", text, text.length + 1);
  // eslint-disable-next-line no-control-regex
  const bad = /[\u0000-\u0008\u000b-\u001f\u007f]/.exec(trimmed);
  if (bad) throw new FilterError("a control character in a pql: query", text, text.indexOf(bad[0]) + 1);
  return trimmed;
}
