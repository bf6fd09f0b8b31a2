import { test } from "node:test";
import assert from "node:assert/strict";
import { dpkgPackageState, packageState, versionAtLeast } from "../../src/puppet/dpkg.js";

// dpkg's own answers, from this machine's dpkg database and dpkg's own order of versions: what the
// privileged helper decides a `package` change on (hostile.test.ts does it in a tree with held and
// pinned test packages).

test("dpkg's order of versions, not a string's: ~ before release, epochs first, numbers as numbers", async () => {
  assert.equal(await versionAtLeast("1.10", "1.9"), true);
  assert.equal(await versionAtLeast("1.0~rc1", "1.0"), false);
  assert.equal(await versionAtLeast("1:0.1", "9.9"), true);
  assert.equal(await versionAtLeast("2.0", "2.0"), true);
  assert.equal(await versionAtLeast("0.1.0", "0.2.0-1"), false);
});

test("the dpkg database: an Essential package, a Protected one, one it does not know", async () => {
  const dpkg = await dpkgPackageState("dpkg");
  assert.equal(dpkg.essential, true);
  assert.equal(dpkg.installed.length, 1);
  assert.equal((await dpkgPackageState("libgcc-s1")).protected, true);
  assert.deepEqual(await dpkgPackageState("muster-no-such-package"), { installed: [], held: false, essential: false, protected: false });
  // a pin is compared with what is installed
  const installed = dpkg.installed[0]!;
  assert.equal((await packageState("dpkg", installed)).pinNotLower, true);
  assert.equal((await packageState("dpkg", "0.1")).pinNotLower, false);
  assert.equal((await packageState("dpkg", "latest")).pinNotLower, undefined);
});
