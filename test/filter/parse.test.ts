import { test } from "node:test";
import assert from "node:assert/strict";
import {
  FilterError,
  parseAgentFilter,
  parseClassFilter,
  parseCompound,
  parseFactFilter,
  parseIdentityFilter,
  parseWith,
} from "../../src/filter/index.js";
import type { CompoundExpr } from "../../src/filter/index.js";
import { MusterError } from "../../src/errors.js";

const lit = (text: string) => ({ kind: "literal", text }) as const;
const re = (source: string) => ({ kind: "regex", source }) as const;
const cls = (name: string): CompoundExpr => ({ kind: "class", value: lit(name) });

function parseError(fn: () => unknown): FilterError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof FilterError, `expected a FilterError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected the parse to fail");
}

test("-F parses every operator, = meaning ==", () => {
  const cases = [
    ["country=de", { fact: "country", operator: "==", value: "de" }],
    ["os.family==Debian", { fact: "os.family", operator: "==", value: "Debian" }],
    ["country!=de", { fact: "country", operator: "!=", value: "de" }],
    ["memorysize_mb>=2048", { fact: "memorysize_mb", operator: ">=", value: "2048" }],
    ["memorysize_mb<=2048", { fact: "memorysize_mb", operator: "<=", value: "2048" }],
    ["processorcount<4", { fact: "processorcount", operator: "<", value: "4" }],
    ["processorcount>4", { fact: "processorcount", operator: ">", value: "4" }],
    ["hostname=~/^web\\d+/", { fact: "hostname", operator: "=~", value: "/^web\\d+/" }],
    ["role=/web|db/", { fact: "role", operator: "==", value: "/web|db/" }],
    ["role!=/web|db/", { fact: "role", operator: "!=", value: "/web|db/" }],
  ] as const;
  for (const [text, expected] of cases) assert.deepEqual(parseFactFilter(text), expected, text);
});

test("-F allows spaces, quotes, a value running to the end, and bare regexes after =~", () => {
  assert.deepEqual(parseFactFilter("  country  ==  de "), { fact: "country", operator: "==", value: "de" });
  assert.deepEqual(parseFactFilter("os=Red Hat"), { fact: "os", operator: "==", value: "Red Hat" });
  assert.deepEqual(parseFactFilter("os='Red Hat'"), { fact: "os", operator: "==", value: "Red Hat" });
  assert.deepEqual(parseFactFilter('motd="say \\"hi\\""'), { fact: "motd", operator: "==", value: 'say "hi"' });
  assert.deepEqual(parseFactFilter("empty=''"), { fact: "empty", operator: "==", value: "" });
  assert.deepEqual(parseFactFilter("hostname=~^web"), { fact: "hostname", operator: "=~", value: "/^web/" });
  // A '/' inside a character class does not end the regex.
  assert.deepEqual(parseFactFilter("path=~/^[/]srv/"), { fact: "path", operator: "=~", value: "/^[/]srv/" });
});

test("-C, -I and -A take a name or a /regex/", () => {
  assert.equal(parseClassFilter("apache::mod::ssl"), "apache::mod::ssl");
  assert.equal(parseClassFilter(" /^apache/ "), "/^apache/");
  assert.equal(parseIdentityFilter("web1.example.com"), "web1.example.com");
  assert.equal(parseIdentityFilter("/^web\\d+\\./"), "/^web\\d+\\./");
  assert.equal(parseAgentFilter("rpcutil"), "rpcutil");
  assert.equal(parseAgentFilter("/^pupp/"), "/^pupp/");
  assert.equal(parseError(() => parseClassFilter("apache nginx")).column, 7);
  assert.equal(parseError(() => parseIdentityFilter("")).reason, "expected an identity");
  assert.equal(parseError(() => parseAgentFilter("/(/")).column, 1);
  assert.equal(parseError(() => parseClassFilter("/web/x")).column, 6);
});

test("-W splits into fact filters and classes", () => {
  assert.deepEqual(parseWith("country=de apache  os='Red Hat' /^web/ role=~/a b/ memorysize_mb>1024"), {
    fact: [
      { fact: "country", operator: "==", value: "de" },
      { fact: "os", operator: "==", value: "Red Hat" },
      { fact: "role", operator: "=~", value: "/a b/" },
      { fact: "memorysize_mb", operator: ">", value: "1024" },
    ],
    class: ["apache", "/^web/"],
  });
  // Errors in the second token point into the whole text.
  const err = parseError(() => parseWith("apache country="));
  assert.equal(err.column, 16);
  assert.equal(err.reason, "expected a value after '='");
  assert.equal(parseError(() => parseWith("   ")).reason, "expected a class or fact filter");
});

test("-S statements: facts, != with spaces, classes, regexes, data plugin calls", () => {
  assert.deepEqual(parseCompound("country=de"), { kind: "fact", fact: "country", operator: "==", value: lit("de") });
  assert.deepEqual(parseCompound("country != de"), { kind: "fact", fact: "country", operator: "!=", value: lit("de") });
  assert.deepEqual(parseCompound("hostname=~/^web\\d+/"), { kind: "fact", fact: "hostname", operator: "=~", value: re("^web\\d+") });
  assert.deepEqual(parseCompound("hostname=~web"), { kind: "fact", fact: "hostname", operator: "=~", value: re("web") });
  assert.deepEqual(parseCompound("role==/web|db/"), { kind: "fact", fact: "role", operator: "==", value: re("web|db") });
  assert.deepEqual(parseCompound("os.family='Red Hat'"), { kind: "fact", fact: "os.family", operator: "==", value: lit("Red Hat") });
  assert.deepEqual(parseCompound('motd="a (b)"'), { kind: "fact", fact: "motd", operator: "==", value: lit("a (b)") });
  assert.deepEqual(parseCompound("memorysize_mb >= 2048"), { kind: "fact", fact: "memorysize_mb", operator: ">=", value: lit("2048") });
  assert.deepEqual(parseCompound("apache"), cls("apache"));
  assert.deepEqual(parseCompound("apache::mod::ssl"), cls("apache::mod::ssl"));
  assert.deepEqual(parseCompound("/^apache/"), { kind: "class", value: re("^apache") });
  assert.deepEqual(parseCompound("provision().locked=false"), {
    kind: "data", plugin: "provision", argument: undefined, field: "locked", operator: "==", value: lit("false"),
  });
  assert.deepEqual(parseCompound("fact('os.family').value=Debian"), {
    kind: "data", plugin: "fact", argument: "os.family", field: "value", operator: "==", value: lit("Debian"),
  });
  assert.deepEqual(parseCompound('fstat( "/etc/hosts" ).stat.size > 10'), {
    kind: "data", plugin: "fstat", argument: "/etc/hosts", field: "stat.size", operator: ">", value: lit("10"),
  });
  assert.deepEqual(parseCompound("puppet().enabled=true"), {
    kind: "data", plugin: "puppet", argument: undefined, field: "enabled", operator: "==", value: lit("true"),
  });
});

test("-S precedence: not binds tighter than and, and tighter than or", () => {
  assert.deepEqual(parseCompound("a or b and c"), {
    kind: "or", operands: [cls("a"), { kind: "and", operands: [cls("b"), cls("c")] }],
  });
  assert.deepEqual(parseCompound("a and b or c"), {
    kind: "or", operands: [{ kind: "and", operands: [cls("a"), cls("b")] }, cls("c")],
  });
  assert.deepEqual(parseCompound("not a and b"), {
    kind: "and", operands: [{ kind: "not", operand: cls("a") }, cls("b")],
  });
  assert.deepEqual(parseCompound("!a or !(b and c)"), {
    kind: "or",
    operands: [{ kind: "not", operand: cls("a") }, { kind: "not", operand: { kind: "and", operands: [cls("b"), cls("c")] } }],
  });
  assert.deepEqual(parseCompound("(a or b) and c"), {
    kind: "and", operands: [{ kind: "or", operands: [cls("a"), cls("b")] }, cls("c")],
  });
  assert.deepEqual(parseCompound("a and b and c"), { kind: "and", operands: [cls("a"), cls("b"), cls("c")] });
  assert.deepEqual(parseCompound("not not a"), cls("a"));
  // Keywords need a word boundary: these are classes and facts, not operators.
  assert.deepEqual(parseCompound("order and notify"), { kind: "and", operands: [cls("order"), cls("notify")] });
  assert.deepEqual(parseCompound("(country=de)and(x)"), {
    kind: "and", operands: [{ kind: "fact", fact: "country", operator: "==", value: lit("de") }, cls("x")],
  });
});

test("errors carry the source, a 1-based column and a message that points at the problem", () => {
  const cases: [() => unknown, number, string][] = [
    [() => parseFactFilter("country="), 9, "expected a value after '='"],
    [() => parseFactFilter("country"), 8, "expected an operator (== != < > <= >= =~ =) after 'country' but found the end"],
    [() => parseFactFilter("=de"), 1, "expected a fact name but found '='"],
    [() => parseFactFilter("os..family=x"), 1, "invalid fact name 'os..family'"],
    [() => parseFactFilter("country===de"), 10, "unexpected '=' after '==': quote a value that starts with an operator character"],
    [() => parseFactFilter("x</a/"), 3, "a regular expression can only follow ==, != or =~, not '<'"],
    [() => parseFactFilter("os='Red Hat"), 4, "unterminated string: no closing '"],
    [() => parseFactFilter("hostname=~/web"), 11, "unterminated regular expression: no closing '/'"],
    [() => parseFactFilter("hostname=~/(/"), 11, "invalid regular expression /(/: Unterminated group"],
    [() => parseCompound("country=de and"), 15, "expected a statement after 'and'"],
    [() => parseCompound("country= and x"), 10, "expected a value after '=' but found 'and'; quote it to compare with the word"],
    [() => parseCompound("a b"), 3, "expected 'and', 'or' or the end but found 'b'"],
    [() => parseCompound("(a and b"), 9, "expected ')' to match the '(' from column 1"],
    [() => parseCompound("a and b)"), 8, "unexpected ')' with no matching '('"],
    [() => parseCompound("(a b)"), 4, "expected 'and', 'or' or ')' but found 'b'"],
    [() => parseCompound("and a"), 1, "expected a statement but found 'and'"],
    [() => parseCompound(""), 1, "expected a statement"],
    [() => parseCompound("not"), 4, "expected a statement after 'not'"],
    [() => parseCompound("a or ()"), 7, "expected a statement after '(' but found ')'"],
    [() => parseCompound("x=/a/b"), 6, "unexpected 'b' after the regular expression"],
    [() => parseCompound("provision()=1"), 12, "expected '.field' after 'provision()' but found '='"],
    [() => parseCompound("fact(os).value=x"), 6, "expected a quoted argument or ')' after 'fact(' but found 'os'"],
    [() => parseCompound("fact('os' x).value=1"), 11, "expected ')' after the argument to fact() but found 'x'"],
    [() => parseCompound("provision().locked"), 19, "expected an operator after 'provision().locked' but found the end"],
    [() => parseCompound("a::b().x=1"), 1, "invalid data plugin name 'a::b'"],
    [() => parseCompound("a and @"), 7, "expected a statement after 'and' but found '@'"],
  ];
  for (const [fn, column, reason] of cases) {
    const err = parseError(fn);
    assert.equal(err.reason, reason);
    assert.equal(err.column, column, reason);
    assert.equal(err.message, `${reason} at column ${column}`);
    assert.equal(err.code, "MUSTER_FILTER_INVALID");
    assert.ok(err instanceof MusterError);
  }
});

test("render() puts a caret under the column", () => {
  const err = parseError(() => parseFactFilter("country="));
  assert.equal(err.render(), ["expected a value after '=' at column 9", "  country=", "          ^"].join("\n"));
  const labelled = parseError(() => parseCompound("a and\tb)")).withContext("-S");
  assert.equal(labelled.message, "-S: unexpected ')' with no matching '(' at column 8");
  assert.equal(labelled.render(), ["-S: unexpected ')' with no matching '(' at column 8", "  a and b)", "         ^"].join("\n"));
});
