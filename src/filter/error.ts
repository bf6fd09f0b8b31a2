import { MusterError } from "../errors.js";

// Renders at most this many characters of the source around the caret, so a 4 KiB filter
// still produces a readable two-line excerpt.
const RENDER_WINDOW = 72;

/**
 * A filter that does not parse or a wire filter with wrong types. `column` is 1-based into
 * `source`; it is 0 when the problem is not at a place in a text (a wrong type on the wire).
 * `context` names where the text came from: "-S", "filter.fact[2]".
 */
export class FilterError extends MusterError {
  readonly reason: string;
  readonly source: string;
  readonly column: number;
  readonly context: string | undefined;

  constructor(reason: string, source: string, column: number, context?: string) {
    super("MUSTER_FILTER_INVALID", formatMessage(reason, column, context));
    this.name = "FilterError";
    this.reason = reason;
    this.source = source;
    this.column = column;
    this.context = context;
  }

  /** The same error, labelled with where its text came from. */
  withContext(context: string): FilterError {
    return new FilterError(this.reason, this.source, this.column, context);
  }

  /** The message, then the source with a caret under the column (for the CLI). */
  render(): string {
    if (this.column < 1) return this.message;
    const { excerpt, caret } = excerptAround(this.source, this.column - 1);
    return `${this.message}\n  ${excerpt}\n  ${" ".repeat(caret)}^`;
  }
}

function formatMessage(reason: string, column: number, context: string | undefined): string {
  const where = column > 0 ? ` at column ${column}` : "";
  return `${context === undefined ? "" : `${context}: `}${reason}${where}`;
}

function excerptAround(source: string, index: number): { excerpt: string; caret: number } {
  // Control characters (newlines, tabs) would break the caret's alignment.
  const flat = source.replace(/[\u0000-\u001f\u007f]/g, " ");
  if (flat.length <= RENDER_WINDOW) return { excerpt: flat, caret: index };
  const start = Math.max(0, Math.min(index - RENDER_WINDOW / 2, flat.length - RENDER_WINDOW));
  const end = Math.min(flat.length, start + RENDER_WINDOW);
  const head = start > 0 ? "..." : "";
  const tail = end < flat.length ? "..." : "";
  return { excerpt: `${head}${flat.slice(start, end)}${tail}`, caret: head.length + index - start };
}
