import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot, tempDir } from "../support/collective.js";

// `npm pack` gives a working npm package: installed from the tarball into a fresh prefix (from the
// npm cache, as an offline machine would), its `muster` bin runs.

const run = promisify(execFile);
const tmp = tempDir("npm-pack");
after(() => tmp.remove());

test("npm pack, then npm install -g of the tarball: bin muster prints the version and its help", async () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { version: string };
  // --ignore-scripts: prepack would rebuild; the test runner already built dist/.
  const packed = await run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", tmp.path], { cwd: repoRoot, maxBuffer: 16 << 20 });
  const info = JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[];
  const files = info[0]!.files.map((f) => f.path);
  for (const f of ["dist/src/cli/main.cjs", "dist/src/cli/main.js", "dist/src/cli/help-replay.cjs", "dist/src/cli/help.json"]) assert.ok(files.includes(f), `${f} is packed`);
  assert.ok(files.includes("puppet/modules/muster/lib/puppet/functions/search_nodes.rb"), "the Puppet module muster ships");
  assert.ok(files.includes("src/web/assets/index.html") && files.includes("src/web/assets/app.js"), "the web console's pages (read at run time from src/web/assets)");
  // The console's pages are the one part of src/ that runs as it is (plain modules for the browser).
  assert.deepEqual(files.filter((f) => /^(src\/(?!web\/assets\/)|test\/|bench\/)|\.ts$|^dist\/test\//.test(f)), [], "no sources or tests");

  const prefix = join(tmp.path, "prefix");
  await run("npm", ["install", "--global", "--prefix", prefix, "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", join(tmp.path, info[0]!.filename)], { maxBuffer: 16 << 20 });
  const bin = join(prefix, "bin", "muster");
  assert.ok(existsSync(bin), "npm linked bin/muster");
  const env = { PATH: `${prefix}/bin:${process.env.PATH}`, HOME: tmp.path };
  assert.equal((await run(bin, ["--version"], { env })).stdout.trim(), pkg.version);
  const help = await run(bin, ["--help"], { env });
  assert.match(help.stdout, /provisioner/);
  // the stored help is what commander renders in the installed tree too
  const rendered = await run(bin, ["provision", "--help"], { env: { ...env, MUSTER_HELP_REPLAY: "off" } });
  assert.equal((await run(bin, ["provision", "--help"], { env })).stdout, rendered.stdout);
});
