// Idempotency keys: a random one per logical call, or one derived for the
// adapter. The rule, written once in docs/clients.md and checked against
// clients/key-vectors.json by the Python, TypeScript and Rust tests:
//   "tk1-" + hex(SHA-256(canonical({args, occurrence, scope, tool})))
// where canonical is the service's fingerprint JSON, so a re-plan that spells
// the arguments differently still gets the same key. `occurrence` (1 by
// default) is for the rare call meant twice in one scope.

import { canonical, sha256Hex } from "./canonical.js";

/** The version of the derivation rule; a new rule gets a new prefix. */
export const KEY_RULE_PREFIX = "tk1-";

/** A fresh random key for one logical call (`ts-` and a UUID). */
export function newKey() {
  return `ts-${globalThis.crypto.randomUUID()}`;
}

/** The key an adapter sends for `tool` with `args` in `scope` (a thread, run or conversation id). */
export async function toolKey(scope, tool, args, occurrence = 1) {
  if (typeof scope !== "string" || scope === "") {
    throw new TypeError("scope must be a non-empty string (a thread, run or conversation id)");
  }
  if (typeof tool !== "string" || tool === "") throw new TypeError("tool must be a non-empty string");
  if (!Number.isInteger(occurrence) || occurrence < 1) {
    throw new TypeError("occurrence must be an integer from 1");
  }
  const payload = { args: args ?? {}, occurrence, scope, tool };
  return KEY_RULE_PREFIX + (await sha256Hex(canonical(payload)));
}
