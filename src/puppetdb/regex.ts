import { FilterError } from "../filter/index.js";

// muster's regexes are JavaScript's; PuppetDB hands PQL's `~` to PostgreSQL, whose advanced
// regular expressions read most of the same syntax the same way. Where they differ, a regex is
// rewritten to mean the same (\b is a backspace to PostgreSQL, its word boundary is \y), or
// refused: sending it as written would select other nodes than the nodes themselves would. Pure.

const SAME = new Set(["d", "D", "w", "W", "s", "S", "t", "n", "r", "f", "v", "0"]);

function refuse(source: string, what: string): never {
  throw new FilterError(`the regular expression /${source.length > 40 ? `${source.slice(0, 40)}...` : source}/ uses ${what}, which PostgreSQL (PuppetDB) reads differently; rewrite it, or use broadcast discovery (--dm broadcast)`, "", 0);
}

/** The PostgreSQL spelling of a JavaScript regex body (no flags), or a FilterError. */
export function pgRegex(source: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const ch = source[i]!;
    if (ch === "\\") {
      const next = source[i + 1];
      if (next === undefined) refuse(source, "a trailing backslash");
      i++;
      if (next === "b" || next === "B") {
        // a word boundary outside a class; inside one JavaScript means backspace, as PostgreSQL does
        out += inClass ? `\\${next}` : next === "b" ? "\\y" : "\\Y";
      } else if (next === "x") {
        const hex = source.slice(i + 1, i + 3);
        if (!/^[0-9A-Fa-f]{2}$/.test(hex)) refuse(source, "\\x without two hex digits");
        out += `\\u00${hex}`; // PostgreSQL's \x takes every hex digit that follows
        i += 2;
      } else if (next === "u") {
        const hex = source.slice(i + 1, i + 5);
        if (!/^[0-9A-Fa-f]{4}$/.test(hex)) refuse(source, "\\u without four hex digits");
        out += `\\u${hex}`;
        i += 4;
      } else if (next === "c") {
        const letter = source[i + 1];
        if (!letter || !/[A-Za-z]/.test(letter)) refuse(source, "\\c without a letter");
        out += `\\c${letter}`;
        i += 1;
      } else if (/[1-9]/.test(next)) {
        out += `\\${next}`; // a back-reference, the same in both
      } else if (inClass && (next === "D" || next === "S" || next === "W")) {
        refuse(source, `\\${next} inside a class`);
      } else if (SAME.has(next)) {
        out += `\\${next}`;
      } else if (/[A-Za-z]/.test(next)) {
        // \k<name>, \p{...}, and PostgreSQL's own \m \M \y \Y \A \Z: a letter JavaScript reads as itself
        refuse(source, `\\${next}`);
      } else {
        out += `\\${next}`; // an escaped punctuation character is itself in both
      }
      continue;
    }
    if (inClass) {
      if (ch === "]") inClass = false;
      out += ch;
      continue;
    }
    if (ch === "[") {
      if (source[i + 1] === "]" || source.startsWith("[^]", i)) refuse(source, "an empty class ([] or [^])");
      inClass = true;
      // a leading ] is literal in PostgreSQL and closes the class in JavaScript: refused above
      out += ch;
      continue;
    }
    if (ch === "(" && source[i + 1] === "?") {
      const kind = source.slice(i + 2, i + 4);
      // lookahead (?= (?!, lookbehind (?<= (?<!, non-capturing (?: read the same; named groups do not exist there
      if (!(kind.startsWith("=") || kind.startsWith("!") || kind.startsWith(":") || kind === "<=" || kind === "<!")) refuse(source, `the group (?${kind.slice(0, 1)}`);
    }
    if (ch === "{" && /^\{,\d*\}/.test(source.slice(i))) refuse(source, "{,n}");
    out += ch;
  }
  return out;
}
