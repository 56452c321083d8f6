// The key rule and the canonical JSON against the shared vectors
// (clients/key-vectors.json), which the Python and Rust tests check too.

import assert from "node:assert/strict";
import { test } from "node:test";
import { canonical, newKey, toolKey } from "../src/index.js";
import { VECTORS } from "./service.mjs";

test("canonical JSON matches the vectors", () => {
  for (const vector of VECTORS.canonical) {
    const printed = canonical(JSON.parse(vector.json));
    if (vector.exact_integers_beyond_2_53) {
      // JavaScript numbers round such integers: the one documented difference.
      assert.notEqual(printed, vector.canonical, vector.name);
    } else {
      assert.equal(printed, vector.canonical, vector.name);
    }
  }
});

test("integers beyond 2^53 are exact as BigInt", () => {
  assert.equal(canonical({ u64: 18446744073709551615n, big: 9007199254740993n }), '{"big":9007199254740993,"u64":18446744073709551615}');
});

test("toolKey matches the vectors", async () => {
  for (const v of VECTORS.keys) {
    assert.equal(await toolKey(v.scope, v.tool, JSON.parse(v.args_json), v.occurrence), v.key, v.name);
  }
});

test("only the named groups share a key", () => {
  const groupOf = new Map();
  VECTORS.same_key.forEach((group, i) => group.forEach((name) => groupOf.set(name, i)));
  const keys = VECTORS.keys;
  for (let i = 0; i < keys.length; i++) {
    for (let j = i + 1; j < keys.length; j++) {
      const same = groupOf.has(keys[i].name) && groupOf.get(keys[i].name) === groupOf.get(keys[j].name);
      assert.equal(keys[i].key === keys[j].key, same, `${keys[i].name} / ${keys[j].name}`);
    }
  }
});

test("a missing scope or a bad occurrence is refused", async () => {
  await assert.rejects(toolKey("", "charge", {}), TypeError);
  await assert.rejects(toolKey("t", "charge", {}, 0), TypeError);
  assert.notEqual(newKey(), newKey());
  assert.match(newKey(), /^ts-[0-9a-f-]{36}$/);
});
