// The client's API against the real service: the typed call, get, by key,
// list with its cursor, cancel, wait, typed errors, the token and user agent.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  BadRequestError,
  CallSettledError,
  Client,
  IdempotencyConflictError,
  NotFoundError,
  RetryExhaustedError,
  VERSION,
} from "../src/index.js";
import { authFile, startService } from "./service.mjs";

test("a call is typed and replayed with its key", async (t) => {
  const service = await startService(t);
  const client = new Client({ baseUrl: service.baseUrl });
  const first = await client.call("charge", { amount: 7 }, { wait: 5 });
  assert.deepEqual([first.status, first.attempt, first.replayed, first.isTerminal], ["succeeded", 1, false, true]);
  assert.deepEqual(first.result, { charged: 7, effect_id: first.effectId });
  const again = await client.call("charge", { amount: 7 }, { key: first.key, wait: 5 });
  assert.deepEqual([again.callId, again.replayed], [first.callId, true]);
  assert.equal((await client.getByKey(first.key)).callId, (await client.get(first.callId)).callId);
  const conflict = await client.call("charge", { amount: 8 }, { key: first.key }).catch((e) => e);
  assert.ok(conflict instanceof IdempotencyConflictError);
  assert.deepEqual([conflict.status, conflict.callId], [409, first.callId]);
  assert.equal(await service.effects(), 1);
});

test("errors are typed and not retried", async (t) => {
  const service = await startService(t);
  const client = new Client({ baseUrl: service.baseUrl });
  await assert.rejects(client.call("charge", { amount: -1 }), (e) => e instanceof BadRequestError && e.code === "bad_request");
  await assert.rejects(client.get("c_0000000000000000"), NotFoundError);
  const failed = await client.call("fail", { retryable: false }, { wait: 5 });
  assert.equal(failed.status, "failed");
  assert.deepEqual([failed.error.code, failed.error.retryable], ["tool_failed", false]);
});

test("list pages follow next and filters", async (t) => {
  const service = await startService(t);
  const client = new Client({ baseUrl: service.baseUrl });
  const made = [];
  for (let n = 1; n <= 5; n++) made.push(await client.call("charge", { amount: n }, { key: `list-${n}`, wait: 5 }));
  await client.call("send_email", { to: "a@example.com" }, { key: "other", wait: 5 });
  const page = await client.list({ tool: "charge", limit: 2 });
  assert.equal(page.calls.length, 2);
  assert.ok(page.next);
  const seen = [];
  for await (const call of client.iterCalls({ tool: "charge", limit: 2 })) seen.push(call.callId);
  assert.deepEqual(seen, made.map((c) => c.callId).reverse());
  const byPrefix = await client.list({ keyPrefix: "list-", status: ["succeeded"] });
  assert.equal(byPrefix.calls.at(-1).key, "list-1");
  assert.equal((await client.list({ effectId: made[0].effectId })).calls[0].callId, made[0].callId);
});

test("cancel and wait", async (t) => {
  const service = await startService(t);
  const client = new Client({ baseUrl: service.baseUrl });
  const running = await client.call("sleep", { seconds: 10 }, { wait: 0 });
  const cancelled = await client.cancel(running.callId, { reason: "not needed" });
  assert.deepEqual([cancelled.status, cancelled.error.message], ["cancelled", "not needed"]);
  const done = await client.call("charge", { amount: 3 }, { wait: 0 });
  assert.equal((await client.wait(done.callId, 5)).status, "succeeded");
  const settled = await client.cancel(done.callId).catch((e) => e);
  assert.ok(settled instanceof CallSettledError);
  assert.equal(settled.call.status, "succeeded");
});

test("the token and the user agent are sent", async (t) => {
  const service = await startService(t, "--auth-file", authFile(t, "acme", "acme-token"));
  const seen = [];
  const fetchSpy = (url, init) => {
    seen.push(init.headers);
    return fetch(url, init);
  };
  const client = new Client({ baseUrl: service.baseUrl, token: "acme-token", fetch: fetchSpy });
  assert.equal((await client.call("charge", { amount: 1 }, { wait: 5 })).status, "succeeded");
  assert.equal((await client.stats()).effects, 1);
  assert.match(seen[0]["user-agent"], new RegExp(`^idempotent-tool-typescript/${VERSION} `));
  assert.equal(seen[0].authorization, "Bearer acme-token");
});

test("no server exhausts the budget and keeps the key", async () => {
  const client = new Client({ baseUrl: "http://127.0.0.1:9", retry: { maxElapsedMs: 500, initialBackoffMs: 50 } });
  const error = await client.call("charge", { amount: 1 }, { key: "kept-key" }).catch((e) => e);
  assert.ok(error instanceof RetryExhaustedError);
  assert.equal(error.key, "kept-key");
  assert.ok(error.attempts >= 2);
});
