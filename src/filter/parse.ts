// The filter language: -F fact filters, -C/-I/-A names, -W mixtures and -S compound
// expressions. Pure: text in, values or a FilterError (with a column) out. See docs/filters.md.
//
// Every parser is a single left-to-right pass over text capped at FilterLimits.maxTextLength,
// and parentheses nest at most FilterLimits.maxNesting deep, so hostile input costs linear time
// and bounded stack.

import { FactOperators } from "../protocol/types.js";
import type { FactFilter, FactOperator } from "../protocol/types.js";
import { FilterError } from "./error.js";
import { compileRegex } from "./regex.js";
import { nearest } from "../suggest.js";
import { checkPqlIdentity } from "./pql-identity.js";

export const FilterLimits = {
  /** Longest filter text (one -F, -S, ... value, or one wire string). */
  maxTextLength: 4096,
  /** Longest /regex/ body: a backstop against pathological patterns. */
  maxRegexLength: 512,
  /** Deepest parenthesis nesting in -S. */
  maxNesting: 64,
  /** Most entries of one kind in a wire filter (identity lists from --nodes can be long). */
  maxEntries: 10_000,
} as const;

/** A right-hand side: a literal (compared as number or string) or a regular expression body. */
export type FilterValue =
  | { readonly kind: "literal"; readonly text: string }
  | { readonly kind: "regex"; readonly source: string };

/** A fact comparison with its value classified. */
export interface FactStatement {
  readonly fact: string;
  readonly operator: FactOperator;
  readonly value: FilterValue;
}

/** The AST of a -S expression. `and`/`or` are n-ary so long chains stay flat. */
export type CompoundExpr =
  | { readonly kind: "or"; readonly operands: readonly CompoundExpr[] }
  | { readonly kind: "and"; readonly operands: readonly CompoundExpr[] }
  | { readonly kind: "not"; readonly operand: CompoundExpr }
  | ({ readonly kind: "fact" } & FactStatement)
  | { readonly kind: "class"; readonly value: FilterValue }
  | {
      readonly kind: "data";
      readonly plugin: string;
      readonly argument: string | undefined;
      readonly field: string; // dotted path into the plugin's result
      readonly operator: FactOperator;
      readonly value: FilterValue;
    };

/** What a client knows about one data plugin: enough to refuse a call no node could answer. */
export interface DataPluginShape {
  /** The result's fields; a filter names one of them, or a dotted path below one. */
  readonly fields: readonly string[];
  /** `name()` without an argument is refused: the plugin answers nothing without one. */
  readonly argumentRequired: boolean;
}

/**
 * The data plugins a client knows (its DDLs). Given to parseCompound, a call to an unknown plugin
 * or field is a FilterError at its column. Nodes never pass one: a plugin that only some nodes
 * have simply does not match on the others.
 */
export interface DataPluginCatalogue {
  lookup(name: string): DataPluginShape | undefined;
  /** Every known plugin name, sorted, for the message. */
  names(): readonly string[];
  /** How to make a plugin known, appended to the unknown-plugin message. */
  readonly hint?: string;
}

// Longest first, so "==" is not read as "=" followed by a value "=...".
const OPERATOR_SPELLINGS = ["==", "!=", "<=", ">=", "=~", "=", "<", ">"] as const;
type OperatorSpelling = (typeof OPERATOR_SPELLINGS)[number];
const REGEX_OPERATORS: readonly FactOperator[] = ["==", "!=", "=~"];
const KEYWORDS = ["and", "or", "not"] as const;

const FACT_NAME = /^[A-Za-z0-9_][\w:-]*(?:\.[\w:-]+)*$/;
const PLUGIN_NAME = /^[A-Za-z_]\w*$/;
const FIELD_NAME = /^\w+(?:\.\w+)*$/;
const WORD_CHAR = /[\w.:-]/;
const OPERATOR_START = "=<>!~";
// Class and agent names: Puppet classes (apache::mod::ssl), agent names (rpcutil).
const NAME_CHAR = /[\w.:-]/;
// Identities are host names in practice; accept anything printable without spaces.
const IDENTITY_CHAR = /[^\s\u0000-\u001f\u007f]/;

type ValueMode = "rest" | "word";
type NameKind = "class" | "identity" | "agent";

/** A position in (a slice of) a source text; every error it raises points into the whole text. */
class Cursor {
  pos: number;
  constructor(
    readonly src: string,
    start: number,
    readonly end: number,
    readonly dataPlugins?: DataPluginCatalogue,
  ) {
    this.pos = start;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  peek(ahead = 0): string {
    const at = this.pos + ahead;
    return at < this.end ? this.src.charAt(at) : "";
  }

  startsWith(text: string): boolean {
    return this.pos + text.length <= this.end && this.src.startsWith(text, this.pos);
  }

  skipSpace(): void {
    while (!this.done && isSpace(this.peek())) this.pos++;
  }

  /** What is at the cursor, for messages: 'word', ')' or the end. */
  describe(): string {
    if (this.done) return "the end";
    let stop = this.pos;
    while (stop < this.end && WORD_CHAR.test(this.src.charAt(stop))) stop++;
    const text = stop > this.pos ? this.src.slice(this.pos, stop) : this.peek();
    return `'${abbreviate(text)}'`;
  }

  fail(reason: string, at: number = this.pos): never {
    throw new FilterError(reason, this.src, at + 1);
  }
}

function isSpace(ch: string): boolean {
  return ch === " " || ch === "\t" || ch === "\n" || ch === "\r" || ch === "\f" || ch === "\v";
}

function abbreviate(text: string, max = 40): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

function checkLength(text: string): void {
  if (typeof text !== "string") throw new FilterError(`expected a string but found ${typeof text}`, "", 0);
  if (text.length > FilterLimits.maxTextLength) {
    throw new FilterError(
      `filter text is ${text.length} characters long; the limit is ${FilterLimits.maxTextLength}`,
      text,
      FilterLimits.maxTextLength + 1,
    );
  }
}

function scanWord(c: Cursor): string {
  const start = c.pos;
  while (!c.done && WORD_CHAR.test(c.peek())) c.pos++;
  return c.src.slice(start, c.pos);
}

function scanOperator(c: Cursor): { operator: FactOperator; spelling: OperatorSpelling } | undefined {
  for (const spelling of OPERATOR_SPELLINGS) {
    if (c.startsWith(spelling)) {
      c.pos += spelling.length;
      return { operator: spelling === "=" ? "==" : spelling, spelling };
    }
  }
  return undefined;
}

function scanQuoted(c: Cursor): string {
  const start = c.pos;
  const quote = c.peek();
  c.pos++;
  let out = "";
  for (;;) {
    if (c.done) c.fail(`unterminated string: no closing ${quote}`, start);
    const ch = c.peek();
    const next = c.peek(1);
    if (ch === "\\" && (next === quote || next === "\\")) {
      out += next;
      c.pos += 2;
    } else if (ch === quote) {
      c.pos++;
      return out;
    } else {
      out += ch;
      c.pos++;
    }
  }
}

/** Reads /body/ (a '/' inside [...] or escaped does not end it) and checks it compiles. */
function scanRegex(c: Cursor): string {
  const start = c.pos;
  c.pos++;
  let inClass = false;
  for (;;) {
    if (c.done) c.fail("unterminated regular expression: no closing '/'", start);
    const ch = c.peek();
    if (ch === "\\") {
      if (c.pos + 1 >= c.end) c.fail("unterminated regular expression: no closing '/'", start);
      c.pos += 2;
      continue;
    }
    if (ch === "[") inClass = true;
    else if (ch === "]") inClass = false;
    else if (ch === "/" && !inClass) break;
    c.pos++;
  }
  const body = c.src.slice(start + 1, c.pos);
  c.pos++;
  checkRegex(body, c.src, start);
  return body;
}

function checkRegex(body: string, src: string, at: number): void {
  const fail = (reason: string): never => {
    throw new FilterError(reason, src, at + 1);
  };
  if (body === "") fail("empty regular expression");
  if (body.length > FilterLimits.maxRegexLength) {
    fail(`regular expression is ${body.length} characters long; the limit is ${FilterLimits.maxRegexLength}`);
  }
  try {
    compileRegex(body);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    const prefix = `Invalid regular expression: /${body}/: `;
    const why = message.startsWith(prefix) ? message.slice(prefix.length) : message;
    fail(`invalid regular expression /${abbreviate(body)}/: ${why}`);
  }
}

function isValueStop(ch: string): boolean {
  return ch === "" || isSpace(ch) || ch === "(" || ch === ")";
}

/**
 * Reads the value after an operator. "rest" (-F, -W tokens): the value runs to the end of the
 * text. "word" (-S): it ends at a space or parenthesis; quote values containing those.
 */
function scanValue(c: Cursor, operator: FactOperator, spelling: string, mode: ValueMode): FilterValue {
  c.skipSpace();
  const at = c.pos;
  const first = c.peek();
  if (c.done || (mode === "word" && isValueStop(first))) c.fail(`expected a value after '${spelling}'`);

  let value: FilterValue;
  if (first === "'" || first === '"') {
    value = { kind: "literal", text: scanQuoted(c) };
    endOfValue(c, mode, "the closing quote");
  } else if (first === "/") {
    value = { kind: "regex", source: scanRegex(c) };
    endOfValue(c, mode, "the regular expression");
  } else {
    // "country==>de" is almost always a typo; a value that really starts so can be quoted.
    if (OPERATOR_START.includes(first)) {
      c.fail(`unexpected '${first}' after '${spelling}': quote a value that starts with an operator character`);
    }
    if (mode === "rest") {
      value = { kind: "literal", text: c.src.slice(at, c.end).trimEnd() };
      c.pos = c.end;
    } else {
      while (!isValueStop(c.peek())) c.pos++;
      const text = c.src.slice(at, c.pos);
      // "country= and x" is a missing value, not country == "and".
      if ((KEYWORDS as readonly string[]).includes(text)) {
        c.fail(`expected a value after '${spelling}' but found '${text}'; quote it to compare with the word`, at);
      }
      value = { kind: "literal", text };
    }
  }

  if (operator === "=~" && value.kind === "literal") {
    checkRegex(value.text, c.src, at);
    return { kind: "regex", source: value.text };
  }
  if (value.kind === "regex" && !REGEX_OPERATORS.includes(operator)) {
    c.fail(`a regular expression can only follow ==, != or =~, not '${spelling}'`, at);
  }
  return value;
}

function endOfValue(c: Cursor, mode: ValueMode, what: string): void {
  if (mode === "rest") {
    c.skipSpace();
    if (!c.done) c.fail(`unexpected ${c.describe()} after ${what}`);
  } else if (!isValueStop(c.peek()) || c.peek() === "(") {
    c.fail(`unexpected ${c.describe()} after ${what}`);
  }
}

function factName(c: Cursor): { name: string; at: number } {
  c.skipSpace();
  const at = c.pos;
  const name = scanWord(c);
  if (name === "") c.fail(`expected a fact name but found ${c.describe()}`);
  if (!FACT_NAME.test(name)) c.fail(`invalid fact name '${abbreviate(name)}'`, at);
  return { name, at };
}

function parseFactAt(src: string, start: number, end: number): FactFilter {
  const c: Cursor = new Cursor(src, start, end);
  const { name } = factName(c);
  c.skipSpace();
  const op = scanOperator(c);
  if (op === undefined) c.fail(`expected an operator (== != < > <= >= =~ =) after '${abbreviate(name)}' but found ${c.describe()}`);
  const value = scanValue(c, op.operator, op.spelling, "rest");
  return { fact: name, operator: op.operator, value: value.kind === "regex" ? `/${value.source}/` : value.text };
}

/**
 * Parses a -F fact filter: `fact OP value`, OP one of == != < > <= >= =~ and = (meaning ==).
 * A /regex/ value is stored as "/regex/"; with =~ a bare value is taken as a regex too.
 */
export function parseFactFilter(text: string): FactFilter {
  checkLength(text);
  return parseFactAt(text, 0, text.length);
}

function parseNameAt(src: string, start: number, end: number, kind: NameKind): string {
  const c: Cursor = new Cursor(src, start, end);
  c.skipSpace();
  if (c.done) c.fail(`expected ${{ class: "a class name", identity: "an identity", agent: "an agent name" }[kind]}`);
  if (c.peek() === "/") {
    const body = scanRegex(c);
    c.skipSpace();
    if (!c.done) c.fail(`unexpected ${c.describe()} after the regular expression`);
    return `/${body}/`;
  }
  const allowed = kind === "identity" ? IDENTITY_CHAR : NAME_CHAR;
  const at = c.pos;
  let stop = c.end;
  while (stop > at && isSpace(src.charAt(stop - 1))) stop--;
  for (let i = at; i < stop; i++) {
    const ch = src.charAt(i);
    if (!allowed.test(ch)) c.fail(`unexpected '${ch}' in ${kind === "identity" ? "identity" : `${kind} name`}`, i);
  }
  return src.slice(at, stop);
}

/** Parses a -C class: a name (Puppet's `apache::mod::ssl` included) or /regex/. */
export function parseClassFilter(text: string): string {
  checkLength(text);
  return parseNameAt(text, 0, text.length, "class");
}

/** Parses a -I identity: a name or /regex/, or `pql:QUERY` for --dm puppetdb (pql-identity.ts). */
export function parseIdentityFilter(text: string): string {
  checkLength(text);
  return checkPqlIdentity(text) ?? parseNameAt(text, 0, text.length, "identity");
}

/** Parses a -A agent: a name or /regex/. */
export function parseAgentFilter(text: string): string {
  checkLength(text);
  return parseNameAt(text, 0, text.length, "agent");
}

/** Ends a -W token at whitespace, keeping quoted strings and regexes after an operator whole. */
function tokenEnd(src: string, start: number): number {
  let i = start;
  while (i < src.length && !isSpace(src.charAt(i))) {
    const ch = src.charAt(i);
    const prev = i > start ? src.charAt(i - 1) : "";
    const opensRegex = ch === "/" && (i === start || prev === "=" || prev === "~");
    if (ch === "'" || ch === '"' || opensRegex) {
      let j = i + 1;
      while (j < src.length && src.charAt(j) !== ch) j += src.charAt(j) === "\\" ? 2 : 1;
      i = Math.min(j + 1, src.length); // unterminated: the token parser reports it
    } else {
      i++;
    }
  }
  return i;
}

/**
 * Parses -W: space-separated tokens, each a fact filter if it contains an operator, else a
 * class (names or /regex/).
 */
export function parseWith(text: string): { fact: FactFilter[]; class: string[] } {
  checkLength(text);
  const out: { fact: FactFilter[]; class: string[] } = { fact: [], class: [] };
  let i = 0;
  for (;;) {
    while (i < text.length && isSpace(text.charAt(i))) i++;
    if (i >= text.length) break;
    const end = tokenEnd(text, i);
    const token = text.slice(i, end);
    if (!token.startsWith("/") && [...OPERATOR_START].some((ch) => token.includes(ch))) {
      out.fact.push(parseFactAt(text, i, end));
    } else {
      out.class.push(parseNameAt(text, i, end, "class"));
    }
    i = end;
  }
  if (out.fact.length === 0 && out.class.length === 0) {
    throw new FilterError("expected a class or fact filter", text, text.length + 1);
  }
  return out;
}

/**
 * Checks a fact filter as it arrives over the wire and classifies its value: with =~ the value
 * is a regex (slashes optional); with == and != a "/.../" value is a regex; otherwise a literal.
 */
export function checkFactFilter(filter: FactFilter): FactStatement {
  const { fact, operator, value } = filter;
  const source = `${fact}${operator}${value}`;
  checkLength(source);
  const fail = (reason: string, at: number): never => {
    throw new FilterError(reason, source, at + 1);
  };
  if (!FACT_NAME.test(fact)) fail(`invalid fact name '${abbreviate(fact)}'`, 0);
  if (!(FactOperators as readonly string[]).includes(operator)) {
    fail(`unknown operator '${abbreviate(operator)}': expected one of ${FactOperators.join(" ")}`, fact.length);
  }
  const at = fact.length + operator.length;
  const slashed = value.length >= 2 && value.startsWith("/") && value.endsWith("/");
  if (operator === "=~") {
    const body = slashed ? value.slice(1, -1) : value;
    checkRegex(body, source, at);
    return { fact, operator, value: { kind: "regex", source: body } };
  }
  if (slashed) {
    if (!REGEX_OPERATORS.includes(operator)) fail(`a regular expression can only follow ==, != or =~, not '${operator}'`, at);
    const body = value.slice(1, -1);
    checkRegex(body, source, at);
    return { fact, operator, value: { kind: "regex", source: body } };
  }
  return { fact, operator, value: { kind: "literal", text: value } };
}

// ---- -S compound expressions -------------------------------------------------------------
//
//   expr      := and ('or' and)*
//   and       := not ('and' not)*
//   not       := ('not' | '!')* primary
//   primary   := '(' expr ')' | '/regex/' | call | fact OP value | class
//   call      := plugin '(' [quoted] ')' '.' field OP value

function keywordAt(c: Cursor): (typeof KEYWORDS)[number] | undefined {
  for (const kw of KEYWORDS) {
    if (c.startsWith(kw) && !WORD_CHAR.test(c.peek(kw.length))) return kw;
  }
  return undefined;
}

/**
 * Parses a -S expression into an AST. Precedence: not > and > or. With `dataPlugins` (a client
 * checking what it is about to send), calls to plugins or fields it does not know are refused.
 */
export function parseCompound(text: string, dataPlugins?: DataPluginCatalogue): CompoundExpr {
  checkLength(text);
  const c: Cursor = new Cursor(text, 0, text.length, dataPlugins);
  const expr = parseOr(c, 0, undefined);
  c.skipSpace();
  if (!c.done) {
    if (c.peek() === ")") c.fail("unexpected ')' with no matching '('");
    c.fail(`expected 'and', 'or' or the end but found ${c.describe()}`);
  }
  return expr;
}

function parseOr(c: Cursor, depth: number, after: string | undefined): CompoundExpr {
  const operands = [parseAnd(c, depth, after)];
  for (;;) {
    c.skipSpace();
    if (keywordAt(c) !== "or") break;
    c.pos += 2;
    operands.push(parseAnd(c, depth, "or"));
  }
  return operands.length === 1 && operands[0] !== undefined ? operands[0] : { kind: "or", operands };
}

function parseAnd(c: Cursor, depth: number, after: string | undefined): CompoundExpr {
  const operands = [parseNot(c, depth, after)];
  for (;;) {
    c.skipSpace();
    if (keywordAt(c) !== "and") break;
    c.pos += 3;
    operands.push(parseNot(c, depth, "and"));
  }
  return operands.length === 1 && operands[0] !== undefined ? operands[0] : { kind: "and", operands };
}

// Iterative, so "!!!!...!x" cannot exhaust the stack; an even count cancels out.
function parseNot(c: Cursor, depth: number, after: string | undefined): CompoundExpr {
  let negate = false;
  let context = after;
  for (;;) {
    c.skipSpace();
    if (keywordAt(c) === "not") {
      c.pos += 3;
      context = "not";
    } else if (c.peek() === "!" && c.peek(1) !== "=") {
      c.pos += 1;
      context = "!";
    } else {
      break;
    }
    negate = !negate;
  }
  const operand = parsePrimary(c, depth, context);
  return negate ? { kind: "not", operand } : operand;
}

function parsePrimary(c: Cursor, depth: number, after: string | undefined): CompoundExpr {
  c.skipSpace();
  const at = c.pos;
  const first = c.peek();
  const expected = after === undefined ? "expected a statement" : `expected a statement after '${after}'`;
  if (c.done) c.fail(expected);
  if (first === "(") {
    if (depth >= FilterLimits.maxNesting) c.fail(`parentheses nested deeper than ${FilterLimits.maxNesting} levels`);
    c.pos++;
    const inner = parseOr(c, depth + 1, "(");
    c.skipSpace();
    if (c.peek() === ")") {
      c.pos++;
      return inner;
    }
    if (c.done) c.fail(`expected ')' to match the '(' from column ${at + 1}`);
    c.fail(`expected 'and', 'or' or ')' but found ${c.describe()}`);
  }
  if (first === "/") {
    const source = scanRegex(c);
    endOfValue(c, "word", "the regular expression");
    return { kind: "class", value: { kind: "regex", source } };
  }
  const keyword = keywordAt(c);
  if (keyword !== undefined) c.fail(`${expected} but found '${keyword}'`);
  const word = scanWord(c);
  if (word === "") c.fail(`${expected} but found ${c.describe()}`);
  if (c.peek() === "(") return parseDataCall(c, word, at);

  const afterWord = c.pos;
  c.skipSpace();
  const op = scanOperator(c);
  if (op !== undefined) {
    if (!FACT_NAME.test(word)) c.fail(`invalid fact name '${abbreviate(word)}'`, at);
    const value = scanValue(c, op.operator, op.spelling, "word");
    return { kind: "fact", fact: word, operator: op.operator, value };
  }
  c.pos = afterWord;
  return { kind: "class", value: { kind: "literal", text: word } };
}

function parseDataCall(c: Cursor, plugin: string, at: number): CompoundExpr {
  if (!PLUGIN_NAME.test(plugin)) c.fail(`invalid data plugin name '${abbreviate(plugin)}'`, at);
  const shape = c.dataPlugins ? knownPlugin(c, c.dataPlugins, plugin, at) : undefined;
  const open = c.pos;
  c.pos++; // (
  c.skipSpace();
  let argument: string | undefined;
  const quote = c.peek();
  if (quote === "'" || quote === '"') {
    argument = scanQuoted(c);
    c.skipSpace();
  }
  if (c.peek() !== ")") {
    c.fail(
      argument === undefined
        ? `expected a quoted argument or ')' after '${plugin}(' but found ${c.describe()}`
        : `expected ')' after the argument to ${plugin}() but found ${c.describe()}`,
    );
  }
  c.pos++;
  if (shape?.argumentRequired && argument === undefined) c.fail(`${plugin}() needs an argument: ${plugin}('...')`, open + 1);
  const call = `${plugin}(${argument === undefined ? "" : "..."})`;
  if (c.peek() !== ".") c.fail(`expected '.field' after '${call}' but found ${c.describe()}`);
  c.pos++;
  const fieldAt = c.pos;
  const field = scanWord(c);
  if (field === "") c.fail(`expected a field name after '${call}.' but found ${c.describe()}`);
  if (!FIELD_NAME.test(field)) c.fail(`invalid field name '${abbreviate(field)}'`, fieldAt);
  const head = field.split(".")[0] ?? field;
  if (shape && !shape.fields.includes(head)) {
    const close = nearest(head, shape.fields);
    c.fail(`${plugin}() has no field '${abbreviate(head)}'${close ? `; did you mean '${close}'?` : ""} (its fields: ${shape.fields.join(", ")})`, fieldAt);
  }
  c.skipSpace();
  const op = scanOperator(c);
  if (op === undefined) c.fail(`expected an operator after '${call}.${abbreviate(field)}' but found ${c.describe()}`);
  const value = scanValue(c, op.operator, op.spelling, "word");
  return { kind: "data", plugin, argument, field, operator: op.operator, value };
}

function knownPlugin(c: Cursor, catalogue: DataPluginCatalogue, plugin: string, at: number): DataPluginShape {
  const shape = catalogue.lookup(plugin);
  if (shape) return shape;
  const names = catalogue.names();
  const close = nearest(plugin, names);
  const known = names.length ? `known data plugins: ${names.join(", ")}` : "no data plugins are known";
  return c.fail(`unknown data plugin '${abbreviate(plugin)}'${close ? `; did you mean '${close}'?` : ""} (${known}${catalogue.hint ? `; ${catalogue.hint}` : ""})`, at);
}
