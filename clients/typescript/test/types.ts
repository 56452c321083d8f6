// Compiled, never run (`npm run typecheck`): the declarations describe the
// API the tests use, and a wrong use fails to compile.

import {
  Client,
  IdempotencyConflictError,
  RetryExhaustedError,
  toolKey,
  type ToolCall,
} from "idempotent-tool";
import { idempotentTool } from "idempotent-tool/ai";

async function firstCall(): Promise<string> {
  const client = new Client({ baseUrl: "http://127.0.0.1:8081", token: "t", retry: { maxElapsedMs: 5000 } });
  const call: ToolCall = await client.call("charge", { amount: 100 }, { wait: 5 });
  if (call.isTerminal && call.error) return call.error.code;
  const page = await client.list({ status: ["failed"], tool: "charge", limit: 10 });
  for await (const each of client.iterCalls({ keyPrefix: "order-" })) void each.callId;
  try {
    await client.call("charge", { amount: 200 }, { key: call.key });
  } catch (error) {
    if (error instanceof IdempotencyConflictError) return error.callId ?? "";
    if (error instanceof RetryExhaustedError) return error.key ?? "";
  }
  const charge = idempotentTool(client, {
    tool: "charge",
    inputSchema: { type: "object" },
    scope: (options) => String(options.experimental_context),
  });
  void charge;
  return (await toolKey("thread-1", "charge", { amount: 100 })) + page.next;
}

void firstCall;
