import { test } from "node:test";
import assert from "node:assert/strict";
import { isLoopback } from "../../src/security/loopback.js";

// One rule for "reachable from this machine only", shared by the console, the registry and the
// lab's listeners: a near miss is not loopback.

test("loopback: 127.0.0.0/8, ::1 in either spelling, localhost", () => {
  for (const h of ["127.0.0.1", "127.0.0.9", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1", "localhost"]) assert.equal(isLoopback(h), true, h);
});

test("near misses are not loopback", () => {
  for (const h of ["0.0.0.0", "::", "10.77.0.1", "128.0.0.1", "1.127.0.0", "127.0.0.256", "127.1", "127.0.0.1.example.net", "localhost.example.net", "::ffff:127.0.0.1", "", " 127.0.0.1"]) assert.equal(isLoopback(h), false, h);
});
