// Types of idempotent-tool/ai, the AI SDK adapter (ai.js).

import type { Tool, ToolExecutionOptions } from "ai";
import type { Client, Json } from "./index.js";

export interface IdempotentToolOptions {
  /** The service's tool name. */
  tool: string;
  /** The JSON Schema of its arguments (GET /v1/tools gives the service's). */
  inputSchema: Record<string, unknown>;
  description?: string;
  /** The application's scope (a conversation, thread or run id), or how to read it from the options. */
  scope?: string | ((options: ToolExecutionOptions) => string);
  /** 2, 3, ... for a call meant again in the same scope (default 1). */
  occurrence?: (options: ToolExecutionOptions, args: Record<string, Json>) => number;
  /** Seconds one execution waits for the call to settle (default 30). */
  wait?: number;
}

/** What the model reads back. */
export interface IdempotentToolAnswer {
  status?: string;
  callId?: string;
  result?: unknown;
  error?: { code: string; message: string };
}

export declare function defaultScope(options: ToolExecutionOptions): string;
export declare function idempotentTool(
  client: Client,
  options: IdempotentToolOptions,
): Tool<Record<string, Json>, IdempotentToolAnswer>;
