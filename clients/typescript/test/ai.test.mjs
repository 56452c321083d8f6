// The AI SDK adapter, driven by the SDK's own mock model (MockLanguageModelV3
// from ai/test) through generateText against the real service: a re-plan that
// repeats a charge under a new toolCallId gets the same call and one effect; a
// charge of another amount is another call.

import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { Client } from "../src/index.js";
import { idempotentTool } from "../src/ai.js";
import { startService } from "./service.mjs";

const CHARGE_SCHEMA = {
  type: "object",
  properties: { amount: { type: "integer", minimum: 1 } },
  required: ["amount"],
  additionalProperties: false,
};

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

function toolStep(toolCallId, amount) {
  return {
    content: [{ type: "tool-call", toolCallId, toolName: "charge", input: JSON.stringify({ amount }) }],
    finishReason: { unified: "tool-calls", raw: undefined },
    usage,
    warnings: [],
  };
}

/** call_1 charges 100; the model re-plans and asks again as call_3 (100.0); then 250. */
function scriptedReplan() {
  return new MockLanguageModelV3({
    doGenerate: [
      toolStep("call_1", 100),
      toolStep("call_3", 100.0),
      toolStep("call_5", 250),
      { content: [{ type: "text", text: "paid" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] },
    ],
  });
}

async function run(client, conversationId) {
  const charge = idempotentTool(client, { tool: "charge", inputSchema: CHARGE_SCHEMA, description: "Charge the card" });
  const result = await generateText({
    model: scriptedReplan(),
    prompt: "pay the invoice",
    tools: { charge },
    stopWhen: stepCountIs(6),
    experimental_context: conversationId ? { conversationId } : undefined,
  });
  const outputs = {};
  for (const step of result.steps) {
    for (const r of step.toolResults) outputs[r.toolCallId] = r.output;
    for (const part of step.content) if (part.type === "tool-error") outputs[part.toolCallId] = { thrown: String(part.error) };
  }
  return outputs;
}

test("a re-plan repeats no charge", async (t) => {
  const service = await startService(t);
  const client = new Client({ baseUrl: service.baseUrl });
  const outputs = await run(client, "conversation-1");
  assert.deepEqual(Object.keys(outputs).sort(), ["call_1", "call_3", "call_5"]);
  assert.equal(outputs.call_1.callId, outputs.call_3.callId);
  assert.equal(outputs.call_3.status, "succeeded");
  assert.notEqual(outputs.call_5.callId, outputs.call_1.callId);
  assert.equal((await service.callsOf("charge")).length, 2);
  assert.equal(await service.effects(), 2);

  const resumed = await run(client, "conversation-1");
  assert.equal(resumed.call_1.callId, outputs.call_1.callId, "the resumed conversation asks for nothing new");
  const other = await run(client, "conversation-2");
  assert.notEqual(other.call_1.callId, outputs.call_1.callId, "another conversation, another call");
  assert.equal((await service.callsOf("charge")).length, 4);
  assert.equal(await service.effects(), 4);
});

test("without a scope the tool refuses to guess", async (t) => {
  const service = await startService(t);
  const outputs = await run(new Client({ baseUrl: service.baseUrl }), undefined);
  assert.match(outputs.call_1.thrown, /no scope for the idempotency key/);
  assert.deepEqual(await service.callsOf("charge"), []);
});
