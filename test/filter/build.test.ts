import { test } from "node:test";
import assert from "node:assert/strict";
import { buildFilter, FilterError, FilterLimits, validateWireFilter } from "../../src/filter/index.js";

function filterError(fn: () => unknown): FilterError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof FilterError, `expected a FilterError, got ${String(err)}`);
    assert.equal(err.code, "MUSTER_FILTER_INVALID");
    return err;
  }
  assert.fail("expected a FilterError");
}

test("buildFilter turns -F -C -I -A -W -S into the wire filter", () => {
  assert.deepEqual(
    buildFilter({
      fact: ["country=de", "hostname=~web"],
      class: ["apache::mod::ssl"],
      identity: ["web1", "/^db/"],
      agent: ["puppet"],
      with: ["base memorysize_mb>=2048"],
      select: ["provision().locked=false and not apache"],
    }),
    {
      fact: [
        { fact: "country", operator: "==", value: "de" },
        { fact: "hostname", operator: "=~", value: "/web/" },
        { fact: "memorysize_mb", operator: ">=", value: "2048" },
      ],
      class: ["apache::mod::ssl", "base"],
      identity: ["web1", "/^db/"],
      agent: ["puppet"],
      compound: ["provision().locked=false and not apache"],
    },
  );
  assert.deepEqual(buildFilter(), { fact: [], class: [], identity: [], agent: [], compound: [] });
});

test("buildFilter errors name the flag", () => {
  const cases: [Parameters<typeof buildFilter>[0], string][] = [
    [{ fact: ["country="] }, "-F: expected a value after '=' at column 9"],
    [{ class: ["a b"] }, "-C: unexpected ' ' in class name at column 2"],
    [{ identity: ["/(/"] }, "-I: invalid regular expression /(/: Unterminated group at column 1"],
    [{ agent: [""] }, "-A: expected an agent name at column 1"],
    [{ with: ["apache x<"] }, "-W: expected a value after '<' at column 10"],
    [{ select: ["(a"] }, "-S: expected ')' to match the '(' from column 1 at column 3"],
  ];
  for (const [options, message] of cases) assert.equal(filterError(() => buildFilter(options)).message, message);
});

test("validateWireFilter accepts a valid filter and defaults missing kinds", () => {
  const wire = JSON.parse(
    JSON.stringify({
      fact: [{ fact: "os.family", operator: "!=", value: "/^Red/" }, { fact: "role", operator: "=~", value: "web" }],
      identity: ["web1"],
      compound: ["a or b"],
    }),
  ) as unknown;
  assert.deepEqual(validateWireFilter(wire), {
    fact: [
      { fact: "os.family", operator: "!=", value: "/^Red/" },
      { fact: "role", operator: "=~", value: "web" },
    ],
    class: [],
    identity: ["web1"],
    agent: [],
    compound: ["a or b"],
  });
  assert.deepEqual(validateWireFilter({}), { fact: [], class: [], identity: [], agent: [], compound: [] });
  const built = buildFilter({ fact: ["a=1"], class: ["/x/"], select: ["x=1"] });
  assert.deepEqual(validateWireFilter(JSON.parse(JSON.stringify(built))), built);
});

test("validateWireFilter rejects wrong types and unparsable parts, saying where", () => {
  const cases: [unknown, string][] = [
    [null, "filter: expected an object but found null"],
    [[], "filter: expected an object but found an array"],
    ["country=de", "filter: expected an object but found a string"],
    [{ class: "apache" }, "filter.class: expected an array but found a string"],
    [{ class: ["ok", 3] }, "filter.class[1]: expected a string but found a number"],
    [{ identity: [null] }, "filter.identity[0]: expected a string but found null"],
    [{ agent: [{}] }, "filter.agent[0]: expected a string but found an object"],
    [{ compound: ["a and"] }, "filter.compound[0]: expected a statement after 'and' at column 6"],
    [{ compound: [["a"]] }, "filter.compound[0]: expected a string but found an array"],
    [{ fact: ["country=de"] }, "filter.fact[0]: expected an object {fact, operator, value} but found a string"],
    [{ fact: [{ fact: "a", operator: "==" }] }, "filter.fact[0].value: expected a string but found nothing"],
    [{ fact: [{ fact: "a", operator: "===", value: "1" }] }, "filter.fact[0].operator: unknown operator '==='; expected one of == != < > <= >= =~"],
    [{ fact: [{ fact: "a", operator: "=", value: "1" }] }, "filter.fact[0].operator: unknown operator '='; expected one of == != < > <= >= =~"],
    [{ fact: [{ fact: "a b", operator: "==", value: "1" }] }, "filter.fact[0]: invalid fact name 'a b' at column 1"],
    [{ fact: [{ fact: "a", operator: "=~", value: "(" }] }, "filter.fact[0]: invalid regular expression /(/: Unterminated group at column 4"],
    [{ fact: [{ fact: "a", operator: ">", value: "/1/" }] }, "filter.fact[0]: a regular expression can only follow ==, != or =~, not '>' at column 3"],
    [{ fact: [{ fact: "a", operator: "==", value: "1", extra: true }] }, "filter.fact[0].extra: unknown key; expected only fact, operator, value"],
    [{ exclude: ["web1"] }, "filter.exclude: unknown key; expected only fact, class, identity, agent, compound"],
    [JSON.parse('{"__proto__": {"x": 1}}'), "filter.__proto__: unknown key; expected only fact, class, identity, agent, compound"],
    [{ identity: new Array(FilterLimits.maxEntries + 1).fill("x") }, `filter.identity: has ${FilterLimits.maxEntries + 1} entries; the limit is ${FilterLimits.maxEntries}`],
    [{ class: ["x".repeat(5000)] }, "filter.class[0]: filter text is 5000 characters long; the limit is 4096 at column 4097"],
    [new Map(), "filter: expected an object but found an object"],
  ];
  for (const [input, message] of cases) assert.equal(filterError(() => validateWireFilter(input)).message, message);
});
