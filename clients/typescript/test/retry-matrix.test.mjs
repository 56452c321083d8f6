// The shared retry matrix (clients/retry-matrix.json) through the TypeScript
// client against the real service: each fault is made for real (the chaos
// proxy, a full queue, a stalled worker, a wrong token, SIGKILL and a restart)
// and each case must end as the file says, as it must in the Rust and Python
// clients.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError, Client } from "../src/index.js";
import { MATRIX, authFile, eventually, startService } from "./service.mjs";

const TOOL = MATRIX.tool;
const WAIT = MATRIX.wait_s;
const RIGHT_TOKEN = "matrix-tenant-token";

/** A fetch that records every POST of a call and its answer, with times. */
function recordingFetch(events) {
  return async (url, init) => {
    const isPost = init.method === "POST" && new URL(url).pathname === "/v1/tool-calls";
    if (isPost) events.push({ kind: "post", at: performance.now() });
    const response = await fetch(url, init);
    if (isPost) events.push({ kind: "answer", at: performance.now(), status: response.status, retryAfter: response.headers.get("retry-after") });
    return response;
  };
}

async function runStep(baseUrl, step, events) {
  const client = new Client({ baseUrl, token: step.token, fetch: recordingFetch(events), retry: { maxElapsedMs: 30_000 } });
  try {
    return await client.call(TOOL, step.args, { key: step.key, wait: WAIT });
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
}

function checkStep(expect, outcome, events) {
  const posts = events.filter((e) => e.kind === "post").length;
  assert.ok(posts >= expect.posts[0] && posts <= expect.posts[1], `posts ${posts} not in ${expect.posts}`);
  if (expect.outcome === "error") {
    assert.ok(outcome instanceof ApiError, `expected ${expect.error}, got ${JSON.stringify(outcome)}`);
    assert.equal(outcome.code, expect.error);
    assert.equal(outcome.status, expect.http);
    return;
  }
  assert.ok(!(outcome instanceof Error), `expected a call, got ${outcome}`);
  assert.equal(outcome.status, expect.outcome);
  assert.equal(outcome.replayed, expect.replayed);
  assert.equal(outcome.attempt, expect.attempt);
  const answers = events.filter((e) => e.kind === "answer");
  if (expect.first_status) assert.equal(answers[0].status, expect.first_status);
  if (expect.honours_retry_after) checkRetryAfterHonoured(events);
}

/** Each POST after a 503 with Retry-After: N waited N seconds. */
function checkRetryAfterHonoured(events) {
  let checked = 0;
  events.forEach((event, index) => {
    if (event.kind !== "answer" || event.status !== 503 || event.retryAfter === null) return;
    const next = events.slice(index + 1).find((e) => e.kind === "post");
    assert.ok(next, "a retry followed the refusal");
    assert.ok(next.at - event.at >= Number(event.retryAfter) * 1000 - 10, `waited ${next.at - event.at} ms`);
    checked++;
  });
  assert.ok(checked >= 1, "a Retry-After was seen");
}

/** Make the case's fault: the service and the base URL the client talks to. */
async function faultSetup(t, testCase) {
  switch (testCase.fault) {
    case "drop_first_response": {
      const service = await startService(t);
      return [service, await service.proxy("drop-response", "--times", "1")];
    }
    case "overloaded": {
      const service = await startService(t, "--workers", "1", "--max-pending", "1");
      for (const n of [1, 2]) {
        const answer = await service.post(`filler-${n}`, "sleep", { seconds: testCase.filler_sleep_s });
        assert.equal(answer.status, 202);
      }
      await eventually("a call queued for the one worker", async () => (await service.queued()) >= 1);
      return [service, service.baseUrl];
    }
    case "wrong_token": {
      const service = await startService(t, "--auth-file", authFile(t, "matrix", RIGHT_TOKEN));
      service.token = RIGHT_TOKEN;
      return [service, service.baseUrl];
    }
    case "same_key_in_flight":
    case "same_key_other_args":
    case "kill_and_restart": {
      const service = await startService(t, "--chaos");
      return [service, service.baseUrl];
    }
    default:
      throw new Error(`unknown fault ${testCase.fault}`);
  }
}

async function prepareKey(testCase, service, key) {
  if (testCase.fault === "same_key_in_flight") {
    assert.equal((await service.post(key, TOOL, testCase.steps[0].args)).status, 202);
    await eventually("the call running", async () => (await service.callsOf(TOOL))[0]?.status === "running");
  }
  if (testCase.fault === "same_key_other_args") {
    assert.equal((await service.post(key, TOOL, testCase.setup_args, 10)).body.status, "succeeded");
  }
}

for (const testCase of MATRIX.cases) {
  test(`retry matrix: ${testCase.name}`, async (t) => {
    const [service, baseUrl] = await faultSetup(t, testCase);
    const key = testCase.key === "generated" ? undefined : `matrix-${testCase.name}-ts`;
    if (key) await prepareKey(testCase, service, key);
    for (const raw of testCase.steps) {
      const token = { wrong: "not-a-token", right: RIGHT_TOKEN }[raw.token];
      const events = [];
      const running = runStep(baseUrl, { token, args: raw.args, key }, events);
      if (testCase.fault === "kill_and_restart") {
        await eventually("the call running", async () => (await service.callsOf(TOOL)).some((c) => c.status === "running"));
        await service.killAndRestart();
      }
      const outcome = await running;
      checkStep(raw.expect, outcome, events);
      if (!key && !(outcome instanceof Error)) assert.match(outcome.key, /^ts-/, "the key the client made is returned");
    }
    assert.equal((await service.callsOf(TOOL)).length, testCase.final.calls);
    assert.equal(await service.effects(), testCase.final.effects);
  });
}
