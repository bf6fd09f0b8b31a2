import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createResourceAgent, parsePropertyArgs, resourceDDL, resourceProperties } from "../../src/agents/resource/index.js";
import { validateInput } from "../../src/ddl/index.js";
import { MusterError, RpcError } from "../../src/errors.js";
import { Status } from "../../src/protocol/status.js";
import { isManagedResource, parseResourceOutput, puppetResourceArgs, readManagedResources } from "../../src/puppet/resource.js";
import { makeContext } from "../support/context.js";

// The resource agent against the real `puppet resource`, on files under a temp dir with the
// node's own confdir and vardir there too (nothing touches /etc/puppet).

const dir = mkdtempSync(join(tmpdir(), "muster-resource-"));
const confdir = join(dir, "conf");
const vardir = join(dir, "var");
const files = join(dir, "files");
const resourcesFile = join(vardir, "state", "resources.txt");
const base = { confdir, vardir, allowed_types: ["file"], file_paths: [files] };

before(() => {
  mkdirSync(confdir, { recursive: true });
  mkdirSync(files, { recursive: true });
});
after(() => rmSync(dir, { recursive: true, force: true }));

interface Outcome {
  status: number;
  message: string;
  data: Record<string, unknown>;
}

/** As the server does it: validate against the DDL, then call the handler; any RpcError becomes the outcome. */
async function call(action: "apply" | "show", data: Record<string, unknown>, config: Record<string, unknown> = base): Promise<Outcome> {
  const agent = createResourceAgent();
  try {
    const input = validateInput(resourceDDL, action, data);
    const ctx = makeContext({ agent: "resource", action, config });
    const out = await (action === "apply" ? agent.actions.apply(input as never, ctx) : agent.actions.show(input as never, ctx));
    return { status: Status.OK, message: "OK", data: out };
  } catch (e) {
    if (e instanceof RpcError) return { status: e.status, message: e.message, data: e.data };
    throw e;
  }
}

describe("apply and show with the real puppet resource", () => {
  test("an allowed type is applied and its resulting state returned; a second apply changes nothing", async () => {
    const path = join(files, "motd");
    const first = await call("apply", { type: "file", name: path, properties: { ensure: "file", content: "hello from muster\n".trim(), mode: "0640" } });
    assert.equal(first.status, Status.OK, first.message);
    assert.equal(readFileSync(path, "utf8"), "hello from muster");
    assert.equal(first.data.changed, true);
    const state = first.data.state as Record<string, unknown>;
    assert.equal(state.ensure, "file");
    assert.match(String(state.content), /^\{sha256\}[0-9a-f]{64}$/);
    assert.ok((first.data.changes as string[]).some((c) => c.includes(`File[${path}]`)), JSON.stringify(first.data.changes));

    const again = await call("apply", { type: "file", name: path, properties: { ensure: "file", content: "hello from muster", mode: "0640" } });
    assert.equal(again.status, Status.OK, again.message);
    assert.equal(again.data.changed, false);
    assert.deepEqual(again.data.changes, []);

    const shown = await call("show", { type: "file", name: path });
    assert.equal(shown.status, Status.OK, shown.message);
    const s = shown.data.state as Record<string, unknown>;
    assert.equal(s.ensure, "file");
    assert.equal(s.mode, "0640");
    assert.equal(shown.data.managed, false);
  });

  test("a failing change is an Aborted reply with Puppet's error and the state it left", async () => {
    const path = join(files, "no", "such", "dir", "f");
    const r = await call("apply", { type: "file", name: path, properties: { ensure: "file" } });
    assert.equal(r.status, Status.Aborted);
    assert.match(r.message, /failed/);
    assert.ok((r.data.errors as string[]).some((e) => /No such file or directory/.test(e)), JSON.stringify(r.data.errors));
    assert.equal((r.data.state as Record<string, unknown>).ensure, "absent");
  });

  test("a property muster's rule does not list is refused before Puppet runs, naming what the type takes", async () => {
    const r = await call("apply", { type: "file", name: join(files, "x"), properties: { no_such_property: "1" } });
    assert.equal(r.status, Status.Aborted);
    assert.equal(r.data.reason, "property_denied");
    assert.match(r.message, /property no_such_property is not allowed; file takes only ensure, content, mode, owner, group/);
    assert.equal(existsSync(join(files, "x")), false);
  });
});

describe("policy: allowed types", () => {
  test("a type not in allowed_types is refused before Puppet runs", async () => {
    const r = await call("apply", { type: "exec", name: "/bin/true", properties: { command: "/bin/true" } });
    assert.equal(r.status, Status.Aborted);
    assert.match(r.message, /resource type 'exec' is not allowed on this node \(allowed: file\)/);
    assert.equal(r.data.reason, "type_denied");
  });

  test("with no allowed_types every type is refused, reads included", async () => {
    const path = join(files, "denied");
    for (const [action, data] of [
      ["apply", { type: "file", name: path, properties: { ensure: "file" } }],
      ["show", { type: "file", name: path }],
    ] as const) {
      const r = await call(action, data, { confdir, vardir });
      assert.equal(r.status, Status.Aborted, action);
      assert.match(r.message, /allowed_types is empty, so every type is refused/);
    }
    assert.equal(existsSync(path), false);
  });

  test("file without file_paths is refused, whatever the path", async () => {
    const r = await call("apply", { type: "file", name: join(files, "unfenced"), properties: { ensure: "file" } }, { confdir, vardir, allowed_types: ["file"] });
    assert.equal(r.status, Status.Aborted);
    assert.match(r.message, /plugins\.resource\.file_paths is not set, so no file may be managed/);
    assert.equal(existsSync(join(files, "unfenced")), false);
  });

  test("a type muster has no rule for is refused even when allowed_types lists it", async () => {
    const r = await call("apply", { type: "exec", name: "/bin/true", properties: { command: "/bin/true" } }, { ...base, allowed_types: ["file", "exec"] });
    assert.equal(r.status, Status.Aborted);
    assert.match(r.message, /resource type 'exec' has no rule in muster/);
  });

  test("a misconfigured allowed_types is the node's fault (UnknownError), not the caller's", async () => {
    const r = await call("show", { type: "file", name: "/tmp" }, { ...base, allowed_types: ["File; rm"] });
    assert.equal(r.status, Status.UnknownError);
    assert.match(r.message, /plugins\.resource\.allowed_types/);
  });
});

describe("policy: file_paths", () => {
  const fenced = base;
  test("a file under file_paths is applied by the real Puppet; elsewhere, or with other properties, it is refused", async () => {
    const ok = join(files, "fenced-ok");
    const r = await call("apply", { type: "file", name: ok, properties: { ensure: "file", content: "hi", mode: "0640" } }, fenced);
    assert.equal(r.status, Status.OK, r.message);
    assert.equal(readFileSync(ok, "utf8"), "hi");
    const outside = join(dir, "outside");
    const { symlinkSync } = await import("node:fs");
    symlinkSync(dir, join(files, "escape"));
    for (const [name, props, why, reason] of [
      [outside, { ensure: "file" }, /outside the directories/, "path_denied"],
      [`${files}/../outside`, { ensure: "file" }, /not a plain absolute path/, "path_denied"],
      ["relative/x", { ensure: "file" }, /not a plain absolute path/, "path_denied"],
      [join(files, "escape", "outside"), { ensure: "file" }, /outside the directories this node allows, through a symbolic link/, "path_denied"],
      [join(files, "copy"), { ensure: "file", source: "/etc/hostname" }, /property source is not allowed/, "property_denied"],
      [join(files, "link"), { ensure: "link", target: "/etc" }, /ensure="link" is not allowed; ensure must be one of file, directory, absent/, "value_denied"],
      [join(files, "link2"), { ensure: "/etc/shadow" }, /ensure="\/etc\/shadow" is not allowed/, "value_denied"],
      [join(files, "suid"), { ensure: "file", mode: "4755" }, /mode="4755" is not allowed; mode must be a mode without setuid/, "value_denied"],
      [join(files, "open"), { ensure: "directory", mode: "0777" }, /mode="0777" is not allowed; mode must be a mode that others cannot write/, "value_denied"],
      [join(files, "owned"), { ensure: "file", owner: "nobody" }, /owner="nobody" is not allowed; owner must be one of plugins\.resource\.file_owners \(none\)/, "value_denied"],
    ] as const) {
      const d = await call("apply", { type: "file", name, properties: props }, fenced);
      assert.equal(d.status, Status.Aborted, name);
      assert.match(d.message, why, name);
      assert.equal(d.data.reason, reason, name);
    }
    assert.equal(existsSync(outside), false);
    assert.equal((await call("show", { type: "file", name: "/etc/hostname" }, fenced)).status, Status.Aborted, "reads are fenced too");
    assert.equal((await call("show", { type: "file", name: ok }, fenced)).status, Status.OK);
  });
});

describe("policy: resources the catalog manages", () => {
  test("a resource listed in resources.txt is refused unless allow_managed", async () => {
    const path = join(files, "managed");
    mkdirSync(join(vardir, "state"), { recursive: true });
    // Puppet writes `type[title]` lower-cased; a file title may carry a trailing slash.
    writeFileSync(resourcesFile, `class[main]\nfile[${path.toLowerCase()}/]\npackage[openssh-server]\n`);
    try {
      const refused = await call("apply", { type: "file", name: path, properties: { ensure: "file" } });
      assert.equal(refused.status, Status.Aborted);
      assert.equal(refused.data.reason, "managed");
      assert.match(refused.message, /managed by this node's Puppet catalog/);
      assert.equal(existsSync(path), false);

      const shown = await call("show", { type: "file", name: path });
      assert.equal(shown.status, Status.OK);
      assert.equal(shown.data.managed, true);

      const allowed = await call("apply", { type: "file", name: path, properties: { ensure: "file" } }, { ...base, allow_managed: "true" });
      assert.equal(allowed.status, Status.OK, allowed.message);
      assert.equal(existsSync(path), true);
    } finally {
      rmSync(resourcesFile, { force: true });
    }
  });

  test("an explicit resources_file is read; an unreadable one refuses changes (fail closed)", async () => {
    const list = join(dir, "listed.txt");
    writeFileSync(list, `file[${join(files, "elsewhere")}]\n`);
    const r = await call("apply", { type: "file", name: join(files, "elsewhere"), properties: { ensure: "file" } }, { ...base, resources_file: list });
    assert.equal(r.data.reason, "managed");
    const unreadable = await call("apply", { type: "file", name: join(files, "z"), properties: { ensure: "file" } }, { ...base, resources_file: dir });
    assert.equal(unreadable.status, Status.Aborted);
    assert.match(unreadable.message, /refusing to change resources/);
  });

  test("matching rules", () => {
    const m = new Set(["file[/etc/motd]", "package[nginx]", "file[/]"]);
    assert.equal(isManagedResource(m, "file", "/etc/motd/"), true);
    assert.equal(isManagedResource(m, "file", "/ETC/MOTD"), true);
    assert.equal(isManagedResource(m, "package", "nginx"), true);
    assert.equal(isManagedResource(m, "service", "nginx"), false);
    assert.equal(isManagedResource(m, "file", "/"), true);
    assert.equal(readManagedResources(join(dir, "missing.txt")).size, 0);
  });
});

describe("input validation", () => {
  const bad: [string, Record<string, unknown>, RegExp][] = [
    ["upper-case type", { type: "File", name: "/tmp/x", properties: { ensure: "file" } }, /input 'type' must match/],
    ["type with a space", { type: "file x", name: "/tmp/x", properties: { ensure: "file" } }, /input 'type' must match/],
    ["name that is an option", { type: "file", name: "--help", properties: { ensure: "file" } }, /input 'name' must match/],
    ["name with a newline", { type: "file", name: "/tmp/a\nb", properties: { ensure: "file" } }, /input 'name' must match/],
    ["name with NUL", { type: "file", name: "/tmp/a\0b", properties: { ensure: "file" } }, /input 'name' must match/],
    ["properties not a hash", { type: "file", name: "/tmp/x", properties: ["ensure=file"] }, /must be a hash/],
    ["property name with a dash", { type: "file", name: "/tmp/x", properties: { "en-sure": "file" } }, /property name "en-sure" must match/],
    ["property name that is an option", { type: "file", name: "/tmp/x", properties: { "--debug": "1" } }, /property name/],
    ["value with a newline", { type: "file", name: "/tmp/x", properties: { content: "a\nb" } }, /line break or NUL/],
    ["empty value", { type: "file", name: "/tmp/x", properties: { content: "" } }, /empty value/],
    ["structured value", { type: "file", name: "/tmp/x", properties: { content: { a: 1 } } }, /string, number or boolean/],
    ["too long value", { type: "file", name: "/tmp/x", properties: { content: "x".repeat(20_000) } }, /too long/],
    ["no properties", { type: "file", name: "/tmp/x", properties: {} }, /no properties to set/],
    ["too long name", { type: "file", name: `/${"a".repeat(2000)}`, properties: { ensure: "file" } }, /at most 1024 characters/],
  ];
  for (const [what, data, re] of bad) {
    test(`refused: ${what}`, async () => {
      const r = await call("apply", data);
      assert.ok(r.status === Status.InvalidData || r.status === Status.MissingData, `${what}: status ${r.status} ${r.message}`);
      assert.match(r.message, re);
    });
  }

  test("numbers and booleans are passed as their text; CLI words parse on the first '='", () => {
    assert.deepEqual(resourceProperties({ uid: 1001, managehome: true, comment: "a=b" }), [
      ["comment", "a=b"],
      ["managehome", "true"],
      ["uid", "1001"],
    ]);
    assert.deepEqual(parsePropertyArgs(["ensure=file", "content=x=y"]), { ensure: "file", content: "x=y" });
    assert.throws(() => parsePropertyArgs(["ensure"]), /not key=value/);
    assert.throws(() => parsePropertyArgs(["a=1", "a=2"]), /more than once/);
  });

  test("the argv builder refuses option-like names even when called directly", () => {
    const s = { confdir, vardir };
    assert.throws(() => puppetResourceArgs(s, "file", "-x"), MusterError);
    assert.throws(() => puppetResourceArgs(s, "file", "/x", [["Bad", "1"]]), MusterError);
    assert.deepEqual(puppetResourceArgs(s, "file", "/x", [["ensure", "file"]]).slice(-3), ["file", "/x", "ensure=file"]);
  });

  test("puppet's output: notices before the YAML document, state from it", () => {
    const out = "Notice: /File[/x]/ensure: created\n---\nfile:\n  \"/x\":\n    ensure: file\n    mode: '0644'\n";
    assert.deepEqual(parseResourceOutput(out, "file"), { state: { ensure: "file", mode: "0644" }, notices: ["/File[/x]/ensure: created"] });
    assert.deepEqual(parseResourceOutput("", "file"), { state: {}, notices: [] });
  });
});

describe("no shell is involved", () => {
  test("shell syntax in names and values reaches Puppet as plain text", async () => {
    const canary = join(files, "pwned");
    const payload = `$(touch ${canary}) \`touch ${canary}\`; touch ${canary} | true && touch ${canary}`;
    const path = join(files, `odd name; touch ${canary.replace(/\//g, "_")} $(id)`);
    const r = await call("apply", { type: "file", name: path, properties: { ensure: "file", content: payload } });
    assert.equal(r.status, Status.OK, r.message);
    assert.equal(readFileSync(path, "utf8"), payload);
    assert.equal(existsSync(canary), false, "a shell ran the payload");
    assert.ok(readdirSync(files).includes(`odd name; touch ${canary.replace(/\//g, "_")} $(id)`));
  });
});
