import { test } from "node:test";
import assert from "node:assert/strict";
import { renderActionHelp, renderAgentHelp } from "../../src/ddl/index.js";
import { MusterError } from "../../src/errors.js";
import { sampleDDL } from "./sample.js";

test("agent help shows metadata and every action", () => {
  const text = renderAgentHelp(sampleDDL);
  assert.match(text, /^sample v1\.0\.0: Exercises every DDL feature\n/);
  assert.match(text, /\n {3}Author: muster\n/);
  assert.match(text, /\n {2}Timeout: 10 seconds\n/);
  assert.match(text, /\nACTIONS:\n {2}configure\n {2}status\n/);
  assert.ok(text.includes(renderActionHelp(sampleDDL, "configure")));
  assert.ok(text.includes(renderActionHelp(sampleDDL, "status")));
});

test("action help lists every input with type, optionality, default and validation", () => {
  const text = renderActionHelp(sampleDDL, "configure");
  const lines = text.split("\n");
  assert.equal(lines[0], "sample#configure: Takes every input type");
  assert.ok(lines.includes("  Usage: muster rpc sample configure name=STRING [command=STRING] [ipaddress=STRING] [ip6=STRING] [note=STRING] [count=INTEGER] [ratio=FLOAT] [load=NUMBER] [force=BOOLEAN] [mode=LIST] [port=LIST] [settings=HASH] [tags=ARRAY]"), text);
  for (const name of Object.keys(sampleDDL.actions.configure.input)) assert.ok(lines.includes(`    ${name}:`), `input ${name} missing`);
  const nameBlock = text.slice(text.indexOf("    name:"), text.indexOf("    command:"));
  assert.equal(
    nameBlock,
    [
      "    name:",
      "       Description: Service name",
      "            Prompt: Name",
      "              Type: string",
      "          Optional: false",
      "        Validation: ^[a-z][a-z0-9-]*$",
      "        Max length: 16",
      "",
    ].join("\n"),
  );
  assert.match(text, /\n {8}Validation: shellsafe\n/);
  assert.match(text, /\n {14}Type: list \(fast, safe\)\n {10}Optional: true\n {11}Default: "safe"\n/);
  assert.match(text, /\n {2}OUTPUT:\n {4}result:\n {7}Description: What happened\n {8}Display As: Result\n/);
});

test("action help shows outputs, defaults and aggregates; no inputs is said plainly", () => {
  const text = renderActionHelp(sampleDDL, "status");
  assert.match(text, /\n {2}Usage: muster rpc sample status\n/);
  assert.match(text, /\n {4}This action takes no input\.\n/);
  assert.match(text, /\n {4}load:\n {7}Description: Load average\n {8}Display As: Load\n {14}Type: float\n {11}Default: 0\n/);
  assert.match(text, /\n {2}SUMMARY:\n {4}summary\(os\)\n {4}summary\(classes\)\n {4}average\(load\) format "%\.2f"\n {4}sum\(packages\)\n {4}boolean_summary\(enabled\)$/);
});

test("unknown action", () => {
  assert.throws(() => renderActionHelp(sampleDDL, "nope"), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_UNKNOWN_ACTION" && /actions: configure, status/.test(e.message));
});
