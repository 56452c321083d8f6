// The client: every method sends through `#send`, the one retry loop (rules
// in retry.js); `call` adds what only a create needs: one key for every
// attempt, and a look-up by key before giving up, so a lost answer never costs
// a new key. It needs nothing but the platform's fetch and WebCrypto.

import { CallSettledError, NotFoundError, RetryExhaustedError, errorClass } from "./errors.js";
import { newKey } from "./keys.js";
import { DEFAULT_RETRY, parseRetryAfter, pauseMs, retryableStatus } from "./retry.js";

export const VERSION = "0.1.0";
const CALLS = "/v1/tool-calls";
/** The longest ?wait= the service holds an answer for, in seconds. */
const MAX_SERVER_WAIT = 30;
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export class Client {
  #base;
  #headers;
  #timeoutMs;
  #fetch;

  constructor({
    baseUrl = "http://127.0.0.1:8081",
    token,
    timeoutMs = 10_000,
    retry,
    userAgent,
    fetch = globalThis.fetch,
  } = {}) {
    this.#base = baseUrl.replace(/\/+$/, "");
    this.retry = { ...DEFAULT_RETRY, ...retry };
    this.#timeoutMs = timeoutMs;
    this.#fetch = fetch;
    this.#headers = {
      accept: "application/json",
      "user-agent": userAgent ?? `idempotent-tool-typescript/${VERSION} (node ${globalThis.process?.versions?.node ?? "?"})`,
    };
    if (token !== undefined && token !== null) this.#headers.authorization = `Bearer ${token}`;
  }

  /** Create-or-get the call of `key` (a new random key if none; it is `call.key`). */
  async call(tool, args = {}, { key, wait, clientId, seq } = {}) {
    key = key ?? newKey();
    const deadline = wait === undefined ? null : Date.now() + wait * 1000;
    const body = { tool, args: args ?? {} };
    if (clientId !== undefined) body.client_id = clientId;
    if (seq !== undefined) body.seq = seq;
    const request = {
      method: "POST",
      path: CALLS + waitQuery(wait),
      headers: { "idempotency-key": key, "content-type": "application/json" },
      body: JSON.stringify(body),
      hold: wait,
      key,
    };
    let call;
    try {
      call = await readCall(await this.#send(request));
    } catch (error) {
      if (!(error instanceof RetryExhaustedError)) throw error;
      call = await this.#lookUp(key, error);
    }
    if (deadline !== null && !call.isTerminal) {
      const settled = await this.#waitUntil(call.callId, deadline);
      call = { ...settled, replayed: call.replayed };
    }
    return call;
  }

  /** The call; with `wait` (seconds), held until it settles or the time is up. */
  async get(callId, { wait } = {}) {
    return readCall(await this.#send({ method: "GET", path: `${CALLS}/${segment(callId)}${waitQuery(wait)}`, hold: wait }));
  }

  /** The call of `key` (for a caller whose first answer was lost). */
  async getByKey(key, { wait } = {}) {
    return readCall(await this.#send({ method: "GET", path: `${CALLS}/by-key/${segment(key)}${waitQuery(wait)}`, hold: wait }));
  }

  /** Wait up to `timeout` seconds for the call to settle; the last state seen. */
  async wait(callId, timeout) {
    return this.#waitUntil(callId, Date.now() + timeout * 1000);
  }

  /** Cancel the call; CallSettledError if it had already settled. */
  async cancel(callId, { reason, wait } = {}) {
    const request = { method: "POST", path: `${CALLS}/${segment(callId)}/cancel${waitQuery(wait)}`, hold: wait ?? 2 };
    if (reason !== undefined) {
      request.headers = { "content-type": "application/json" };
      request.body = JSON.stringify({ reason });
    }
    return readCall(await this.#send(request));
  }

  /** One page of the caller's calls, newest first; pass `page.next` as `next` for the next. */
  async list(filters = {}) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) {
      if (value === undefined || value === null) continue;
      if (name === "status" && Array.isArray(value)) value.forEach((s) => params.append("status", s));
      else if (name === "businessKey") params.append("business_key", Array.isArray(value) ? JSON.stringify(value) : String(value));
      else params.append(snake(name), String(value));
    }
    const query = params.size ? `?${params.toString().replaceAll("+", "%20")}` : "";
    const body = await readJson(await this.#send({ method: "GET", path: CALLS + query }));
    return { calls: body.calls.map((c) => toCall(c, false)), next: body.next ?? null };
  }

  /** Every call `list` finds, following `next` page after page. */
  async *iterCalls(filters = {}) {
    let next;
    do {
      const page = await this.list({ ...filters, next });
      yield* page.calls;
      next = page.next;
    } while (next);
  }

  /** The tools the server runs, with their argument schemas. */
  async tools() {
    return (await readJson(await this.#send({ method: "GET", path: "/v1/tools" }))).tools;
  }

  /** GET /stats: the caller's calls by status and attempt, effects. */
  async stats() {
    return readJson(await this.#send({ method: "GET", path: "/stats" }));
  }

  async #waitUntil(callId, deadline) {
    let call = await this.get(callId);
    while (!call.isTerminal) {
      const remaining = (deadline - Date.now()) / 1000;
      if (remaining <= 0) break;
      call = await this.get(callId, { wait: remaining });
    }
    return call;
  }

  async #lookUp(key, exhausted) {
    try {
      return await this.getByKey(key);
    } catch (error) {
      if (error instanceof NotFoundError || error instanceof RetryExhaustedError) {
        throw new RetryExhaustedError(key, exhausted.attempts, exhausted.lastError);
      }
      throw error;
    }
  }

  /** Send `request`, retrying what may be retried, within the budget. */
  async #send(request) {
    const started = Date.now();
    const holdMs = Math.min(request.hold ?? 0, MAX_SERVER_WAIT) * 1000;
    for (let attempts = 1; ; attempts++) {
      let failure;
      let retryAfterMs = null;
      try {
        const response = await this.#fetch(this.#base + request.path, {
          method: request.method,
          headers: { ...this.#headers, ...request.headers },
          body: request.body,
          signal: AbortSignal.timeout(this.#timeoutMs + holdMs),
        });
        if (response.status < 300 || !retryableStatus(response.status)) return response;
        retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
        failure = await answerError(response);
      } catch (error) {
        if (!retryableTransportError(error)) throw error;
        failure = error;
      }
      const pause = pauseMs(this.retry, attempts - 1, retryAfterMs);
      if (Date.now() + pause - started > this.retry.maxElapsedMs) {
        throw new RetryExhaustedError(request.key ?? null, attempts, failure);
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** fetch's own failures (a refused or reset connection, a timeout), not ours. */
function retryableTransportError(error) {
  return error instanceof TypeError || error?.name === "TimeoutError" || error?.name === "AbortError";
}

function waitQuery(wait) {
  if (wait === undefined || wait === null) return "";
  const seconds = Math.max(0, Math.min(MAX_SERVER_WAIT, wait));
  return `?wait=${Number(seconds.toFixed(3))}`;
}

function segment(text) {
  return encodeURIComponent(text);
}

function snake(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

async function answerError(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const error = body && typeof body.error === "object" && body.error ? body.error : {};
  const code = String(error.code ?? `http_${response.status}`);
  const Class = errorClass(response.status, code);
  const failure = new Class(response.status, code, String(error.message ?? response.statusText), {
    callId: error.call_id ?? null,
    requestId: response.headers.get("x-request-id"),
    retryAfter: parseRetryAfter(response.headers.get("retry-after")),
    body,
  });
  if (failure instanceof CallSettledError && body?.call) failure.call = toCall(body.call, false);
  return failure;
}

async function readJson(response) {
  if (response.status >= 300) throw await answerError(response);
  return response.json();
}

async function readCall(response) {
  const body = await readJson(response);
  return toCall(body, response.headers.get("idempotent-replayed") === "true");
}

/** A call as the service answered it, camelCased; `raw` is the JSON as sent. */
export function toCall(body, replayed) {
  const error = body.error && typeof body.error === "object"
    ? { code: String(body.error.code ?? ""), message: String(body.error.message ?? ""), retryable: Boolean(body.error.retryable) }
    : null;
  return {
    callId: body.call_id,
    key: body.idem_key,
    tool: body.tool,
    status: body.status,
    attempt: body.attempt ?? 0,
    args: body.args ?? null,
    result: body.result ?? null,
    error,
    effectId: body.effect_id ?? null,
    replayed,
    clientId: body.client_id ?? null,
    seq: body.seq ?? null,
    createdAt: body.created_at ?? null,
    updatedAt: body.updated_at ?? null,
    expiresAt: body.expires_at ?? null,
    nextAttemptAt: body.next_attempt_at ?? null,
    cancelRequestedAt: body.cancel_requested_at ?? null,
    tenant: body.tenant ?? null,
    isTerminal: TERMINAL.has(body.status),
    raw: body,
  };
}
