// The AI SDK adapter: a `tool()` whose every execution is a service call
// with a stable key. The model names a new toolCallId each time it re-plans;
// the key here comes from the application's scope, the tool and the canonical
// arguments (the rule in docs/clients.md), so the same charge in the same
// conversation is one call however often the model asks for it. The scope is
// `scope` (a string, or a function of the execution options), else the
// `conversationId`, `threadId` or `runId` of generateText's
// `experimental_context`; with none the tool refuses to guess.

import { jsonSchema, tool as aiTool } from "ai";
import { ApiError } from "./errors.js";
import { toolKey } from "./keys.js";

const SCOPE_NAMES = ["conversationId", "threadId", "runId"];

/** The scope from `experimental_context`, or an error that says how to name one. */
export function defaultScope(options) {
  const context = options?.experimental_context;
  for (const name of SCOPE_NAMES) {
    if (context && typeof context === "object" && context[name]) return String(context[name]);
  }
  throw new TypeError(
    "no scope for the idempotency key: pass experimental_context: { conversationId } to generateText, or scope",
  );
}

/** An AI SDK tool named by the caller, run by the service as `tool`. */
export function idempotentTool(client, { tool, inputSchema, description, scope, occurrence, wait = 30 }) {
  return aiTool({
    description,
    inputSchema: jsonSchema(inputSchema),
    async execute(args, options) {
      const name = typeof scope === "string" ? scope : (scope ?? defaultScope)(options);
      const key = await toolKey(name, tool, args, occurrence ? occurrence(options, args) : 1);
      try {
        const call = await client.call(tool, args, { key, wait });
        return answer(call);
      } catch (error) {
        if (error instanceof ApiError) return { error: { code: error.code, message: error.detail } };
        throw error;
      }
    },
  });
}

/** What the model reads: the outcome, or the call still running with its id. */
function answer(call) {
  const out = { status: call.status, callId: call.callId };
  if (call.status === "succeeded") out.result = call.result;
  else if (call.error) out.error = { code: call.error.code, message: call.error.message };
  return out;
}
