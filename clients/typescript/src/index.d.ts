// Types of idempotent-tool (the JavaScript is in index.js and its modules;
// `npm run typecheck` holds these declarations to test/types.ts).

export declare const VERSION: string;

/** JSON as the service reads it; a bigint carries an integer beyond 2^53 exactly. */
export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json | undefined };

export type CallStatus = "pending" | "running" | "succeeded" | "failed" | "cancelled";

/** Why a call failed or was cancelled (README's tool error codes). */
export interface ToolError {
  code: string;
  message: string;
  retryable: boolean;
}

/** One call as the service answered it. `args` and `result` are null in list pages. */
export interface ToolCall {
  callId: string;
  /** The idempotency key: persist it to ask again for the same call. */
  key: string;
  tool: string;
  status: CallStatus;
  attempt: number;
  args: Record<string, unknown> | null;
  result: unknown;
  error: ToolError | null;
  effectId: string | null;
  /** The answer was the call an earlier request with the same key made (Idempotent-Replayed). */
  replayed: boolean;
  clientId: string | null;
  seq: number | null;
  createdAt: number | null;
  updatedAt: number | null;
  expiresAt: number | null;
  nextAttemptAt: number | null;
  cancelRequestedAt: number | null;
  tenant: string | null;
  /** Succeeded, failed or cancelled: it will not change again. */
  isTerminal: boolean;
  /** The JSON as the service sent it. */
  raw: Record<string, unknown>;
}

export interface CallPage {
  calls: ToolCall[];
  /** The cursor of the next page; null on the last. */
  next: string | null;
}

export interface RetryPolicy {
  /** All retries of one request start within this (default 30 000). */
  maxElapsedMs: number;
  /** The first backoff, doubled per retry (default 100), each pause drawn from its upper half. */
  initialBackoffMs: number;
  maxBackoffMs: number;
  /** A Retry-After is honoured up to this (default 30 000). */
  maxRetryAfterMs: number;
}

export declare const DEFAULT_RETRY: Readonly<RetryPolicy>;

export interface ClientOptions {
  /** http:// or https:// (TLS is the platform's fetch). */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <token>`; its tenant owns the keys. */
  token?: string | null;
  /** Each request's timeout, plus the ?wait= it asks the server to hold it. */
  timeoutMs?: number;
  retry?: Partial<RetryPolicy>;
  userAgent?: string;
  fetch?: typeof globalThis.fetch;
}

export interface CallOptions {
  /** The idempotency key; a new random one (returned as `call.key`) if absent. */
  key?: string;
  /** Seconds to wait for the call to settle; the answer may still be in flight. */
  wait?: number;
  clientId?: string;
  seq?: number;
}

export interface ListFilters {
  status?: CallStatus | CallStatus[];
  tool?: string;
  key?: string;
  keyPrefix?: string;
  businessKey?: string | Json[];
  effectId?: string;
  /** RFC 3339. */
  createdAfter?: string;
  createdBefore?: string;
  limit?: number;
  next?: string | null;
  /** Admins only: a tenant's name, or "*". */
  tenant?: string;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly retry: RetryPolicy;
  call(tool: string, args?: Record<string, Json | undefined>, options?: CallOptions): Promise<ToolCall>;
  get(callId: string, options?: { wait?: number }): Promise<ToolCall>;
  getByKey(key: string, options?: { wait?: number }): Promise<ToolCall>;
  wait(callId: string, timeout: number): Promise<ToolCall>;
  cancel(callId: string, options?: { reason?: string | null; wait?: number }): Promise<ToolCall>;
  list(filters?: ListFilters): Promise<CallPage>;
  iterCalls(filters?: Omit<ListFilters, "next">): AsyncGenerator<ToolCall, void, undefined>;
  tools(): Promise<Array<Record<string, unknown>>>;
  stats(): Promise<Record<string, unknown> & { effects: number }>;
}

export declare function canonical(value: Json | undefined): string;
export declare function sha256Hex(text: string): Promise<string>;
export declare function fingerprint(tool: string, args: Record<string, Json | undefined>): Promise<string>;
export declare const KEY_RULE_PREFIX: "tk1-";
export declare function newKey(): string;
export declare function toolKey(
  scope: string,
  tool: string,
  args: Record<string, Json | undefined> | null | undefined,
  occurrence?: number,
): Promise<string>;

export declare class IdempotentToolError extends Error {}

export declare class ApiError extends IdempotentToolError {
  constructor(
    status: number,
    code: string,
    message: string,
    extra?: { callId?: string | null; requestId?: string | null; retryAfter?: number | null; body?: unknown },
  );
  status: number;
  /** The service's stable error code (README's error-code table). */
  code: string;
  /** The service's message. */
  detail: string;
  /** For a 409: the call that owns the key or the intent. */
  callId: string | null;
  requestId: string | null;
  /** Retry-After in ms, when sent. */
  retryAfter: number | null;
  body: unknown;
}
export declare class BadRequestError extends ApiError {}
export declare class AuthenticationError extends ApiError {}
export declare class PermissionDeniedError extends ApiError {}
export declare class NotFoundError extends ApiError {}
export declare class ConflictError extends ApiError {}
export declare class IdempotencyConflictError extends ConflictError {}
export declare class DuplicateIntentError extends ConflictError {}
export declare class CallSettledError extends ConflictError {
  call?: ToolCall;
}
export declare class UnavailableError extends ApiError {}
export declare class RetryExhaustedError extends IdempotentToolError {
  constructor(key: string | null, attempts: number, lastError: unknown);
  /** The key every attempt sent: retry the logical call later with it. */
  key: string | null;
  attempts: number;
  lastError: unknown;
}
