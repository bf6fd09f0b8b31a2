import { test } from "node:test";
import assert from "node:assert/strict";
import { MusterError } from "../../src/errors.js";
import { decodeReply, decodeRequest, encodeReply, encodeRequest, MAX_MESSAGE_BYTES } from "../../src/protocol/envelope.js";
import { generateSigningKey, signRequest } from "../../src/protocol/signing.js";
import { REPLY_PROTOCOL, REQUEST_PROTOCOL, emptyFilter, type Reply, type Request } from "../../src/protocol/types.js";

const enc = new TextEncoder();
const { key } = generateSigningKey("user=alice");

function request(): Request {
  return signRequest(
    { protocol: REQUEST_PROTOCOL, id: "abc123", sender: "h:1", caller: key.name, pubkey: key.publicKey, collective: "muster", agent: "rpcutil", action: "ping", data: {}, filter: emptyFilter(), ttl: 60, time: Date.now(), target: "broadcast" },
    key,
  );
}

function bytesOf(o: unknown): Uint8Array {
  return enc.encode(JSON.stringify(o));
}

function rejects(bytes: Uint8Array, reason: RegExp, what: string): void {
  assert.throws(
    () => decodeRequest(bytes),
    (e: unknown) => e instanceof MusterError && e.code === "MUSTER_ENVELOPE_INVALID" && reason.test(e.message),
    `${what} should be refused with ${reason}`,
  );
}

test("a request survives encode and decode", () => {
  const req = request();
  assert.deepEqual(decodeRequest(encodeRequest(req)), req);
});

test("a missing filter decodes as the empty filter", () => {
  const { filter: _f, ...rest } = request();
  assert.deepEqual(decodeRequest(bytesOf(rest)).filter, emptyFilter());
});

test("garbage, invalid UTF-8 and JSON that is not an object are refused", () => {
  rejects(new Uint8Array([0xff, 0xfe, 0x00, 0x01]), /not UTF-8/, "invalid UTF-8");
  rejects(enc.encode("{not json"), /not JSON/, "broken JSON");
  rejects(new Uint8Array(0), /not JSON/, "empty message");
  for (const v of ["null", "42", '"s"', "[1,2]", "true"]) rejects(enc.encode(v), /not a JSON object/, v);
});

test("a wrong or missing protocol is refused", () => {
  rejects(bytesOf({ ...request(), protocol: "muster/request/0" }), /unsupported protocol/, "old protocol");
  const { protocol: _p, ...rest } = request();
  rejects(bytesOf(rest), /unsupported protocol/, "no protocol");
});

test("every field with the wrong type is refused, naming the field", () => {
  const cases: [keyof Request, unknown][] = [
    ["id", 5],
    ["sender", null],
    ["caller", ["a"]],
    ["pubkey", {}],
    ["collective", 1],
    ["agent", true],
    ["action", undefined],
    ["data", "x"],
    ["data", [1]],
    ["data", null],
    ["filter", "x"],
    ["filter", [1]],
    ["ttl", "60"],
    ["time", "now"],
    ["time", null],
    ["signature", 12],
  ];
  for (const [field, value] of cases) {
    const o: Record<string, unknown> = { ...request() };
    if (value === undefined) delete o[field];
    else o[field] = value;
    rejects(bytesOf(o), new RegExp(`'${field}'`), `${field}=${JSON.stringify(value)}`);
  }
});

test("ttl out of range and oversized fields are refused", () => {
  for (const ttl of [0, -1, 86401]) rejects(bytesOf({ ...request(), ttl }), /ttl/, `ttl ${ttl}`);
  rejects(bytesOf({ ...request(), id: "x".repeat(65) }), /'id' longer/, "long id");
  rejects(bytesOf({ ...request(), agent: "a".repeat(65) }), /'agent' longer/, "long agent");
  rejects(bytesOf({ ...request(), signature: "s".repeat(129) }), /'signature' longer/, "long signature");
  // non-finite numbers cannot be written in JSON; 1e999 parses as Infinity
  rejects(enc.encode(JSON.stringify(request()).replace(/"time":\d+/, '"time":1e999')), /'time' must be a number/, "infinite time");
});

test("a message over the size limit is refused before it is parsed", () => {
  const big = new Uint8Array(MAX_MESSAGE_BYTES + 1).fill(0x20);
  rejects(big, /exceeds/, "oversized");
});

test("replies round-trip, and malformed replies are refused", () => {
  const reply: Reply = { protocol: REPLY_PROTOCOL, requestid: "abc", sender: "n1", agent: "rpcutil", action: "ping", time: 1, statuscode: 0, statusmsg: "OK", data: { pong: 1 } };
  assert.deepEqual(decodeReply(encodeReply(reply)), reply);
  assert.throws(() => decodeReply(bytesOf({ ...reply, protocol: REQUEST_PROTOCOL })), /reply protocol/);
  assert.throws(() => decodeReply(bytesOf({ ...reply, statuscode: "0" })), /statuscode/);
  assert.throws(() => decodeReply(bytesOf({ ...reply, data: [] })), /data/);
});
