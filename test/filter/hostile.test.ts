import { test } from "node:test";
import assert from "node:assert/strict";
import {
  compileFilter,
  FilterError,
  FilterLimits,
  parseClassFilter,
  parseCompound,
  parseFactFilter,
  parseWith,
  validateWireFilter,
} from "../../src/filter/index.js";

function filterError(fn: () => unknown): FilterError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof FilterError, `expected a FilterError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected a FilterError");
}

test("text longer than the limit is refused before parsing, pointing just past the limit", () => {
  const long = `a${" or a".repeat(1000)}`;
  assert.ok(long.length > FilterLimits.maxTextLength);
  for (const parse of [parseCompound, parseFactFilter, parseClassFilter, parseWith]) {
    const err = filterError(() => parse(long));
    assert.equal(err.column, FilterLimits.maxTextLength + 1);
    assert.equal(err.reason, `filter text is ${long.length} characters long; the limit is 4096`);
  }
  // Just under the limit parses, and a flat 800-way `or` evaluates.
  const ok = `a${" or a".repeat(800)}`;
  const expr = parseCompound(ok);
  assert.equal(expr.kind === "or" && expr.operands.length, 801);
  const filter = { fact: [], class: [], identity: [], agent: [], compound: [ok] };
  assert.equal(compileFilter(filter).matches({ identity: "n", facts: {}, classes: ["a"], agents: [], collectives: [] }), true);
});

test("regexes: too long, invalid or empty are refused with their column", () => {
  const body = "a".repeat(FilterLimits.maxRegexLength + 1);
  const err = filterError(() => parseCompound(`x and y=~/${body}/`));
  assert.equal(err.column, 10);
  assert.equal(err.reason, `regular expression is ${body.length} characters long; the limit is 512`);
  assert.equal(parseCompound(`y=~/${"a".repeat(FilterLimits.maxRegexLength)}/`).kind, "fact");
  assert.equal(filterError(() => parseCompound("x=~/[/")).reason, "unterminated regular expression: no closing '/'");
  assert.equal(filterError(() => parseCompound("x=~/a\\")).reason, "unterminated regular expression: no closing '/'");
  assert.equal(filterError(() => parseCompound("x and /*/")).reason, "invalid regular expression /*/: Nothing to repeat");
  assert.equal(filterError(() => parseCompound("x and /*/")).column, 7);
  assert.equal(filterError(() => parseFactFilter("x==//")).reason, "empty regular expression");
  assert.equal(filterError(() => parseFactFilter("x=~")).reason, "expected a value after '=~'");
});

test("unbalanced parentheses", () => {
  const cases: [string, number, string][] = [
    ["(", 2, "expected a statement after '('"],
    ["((a)", 5, "expected ')' to match the '(' from column 1"],
    ["(a))", 4, "unexpected ')' with no matching '('"],
    [")(", 1, "expected a statement but found ')'"],
    ["a and (b or (c and d)", 22, "expected ')' to match the '(' from column 7"],
    ["provision(.x=1", 11, "expected a quoted argument or ')' after 'provision(' but found '.x'"],
  ];
  for (const [text, column, reason] of cases) {
    const err = filterError(() => parseCompound(text));
    assert.equal(err.reason, reason, text);
    assert.equal(err.column, column, text);
  }
});

test("deep nesting is refused instead of exhausting the stack; long not-chains are fine", () => {
  const depth = FilterLimits.maxNesting;
  assert.equal(parseCompound(`${"(".repeat(depth)}a${")".repeat(depth)}`).kind, "class");
  const err = filterError(() => parseCompound(`${"(".repeat(2000)}a${")".repeat(2000)}`));
  assert.equal(err.reason, "parentheses nested deeper than 64 levels");
  assert.equal(err.column, depth + 1);
  assert.deepEqual(parseCompound(`${"!".repeat(4001)}a`), { kind: "not", operand: { kind: "class", value: { kind: "literal", text: "a" } } });
  assert.deepEqual(parseCompound(`${"not ".repeat(1000)}a`), { kind: "class", value: { kind: "literal", text: "a" } });
});

test("garbage gets a FilterError, never another exception", () => {
  const inputs = ["\u0000", "=", "==", "!", "!=", "'", '"', "/", "()", "a(", "a('x", "a('x')", "a('x').", "a and or b",
    "x=\u0000", "é", "a\nand\nb=", "$(rm -rf /)", "a ; b", "x=='unterminated"];
  for (const text of inputs) {
    try {
      parseCompound(text);
    } catch (err) {
      assert.ok(err instanceof FilterError, `${JSON.stringify(text)}: ${String(err)}`);
      assert.ok(err.column >= 1 && err.column <= text.length + 1, JSON.stringify(text));
      assert.ok(err.render().includes("^"));
    }
  }
  assert.equal(filterError(() => parseCompound("a\nand\nb=")).render().split("\n")[1], "  a and b=");
  assert.equal(filterError(() => validateWireFilter(undefined)).message, "filter: expected an object but found nothing");
});

test("render() windows a long source around the caret", () => {
  const text = `${"a and ".repeat(400)}b=`;
  const err = filterError(() => parseCompound(text));
  assert.equal(err.column, text.length + 1);
  const [, excerpt, caret] = err.render().split("\n");
  assert.ok(excerpt !== undefined && caret !== undefined);
  assert.ok(excerpt.length < 90, excerpt);
  assert.ok(excerpt.startsWith("  ..."));
  assert.equal(caret.indexOf("^"), excerpt.length); // just past the last character, as at the end of the text
});
