// Typed errors: one class per answer a caller handles differently. Every
// refusal the service answers is an ApiError with its HTTP status, its stable
// `code` (README's error-code table) and, for a 409, the `callId` that owns the
// key. None is retried. RetryExhaustedError is what remains when every retry
// failed; it carries the key, so the caller can retry the same call later.

export class IdempotentToolError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class ApiError extends IdempotentToolError {
  constructor(status, code, message, { callId = null, requestId = null, retryAfter = null, body = null } = {}) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.detail = message;
    this.callId = callId;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
    this.body = body;
  }
}

/** 400: `bad_request`, `missing_idempotency_key`. */
export class BadRequestError extends ApiError {}
/** 401 `unauthorized`: no token, or one that matches no tenant. */
export class AuthenticationError extends ApiError {}
/** 403: `forbidden`, `host_not_allowed`, `origin_not_allowed`. */
export class PermissionDeniedError extends ApiError {}
/** 404 `not_found`. */
export class NotFoundError extends ApiError {}
/** 409: the key or the intent belongs to another call (`callId`). */
export class ConflictError extends ApiError {}
/** 409 `idempotency_conflict`: the key was used with a different request. */
export class IdempotencyConflictError extends ConflictError {}
/** 409 `duplicate_intent`: a live call of the tool has the same business key. */
export class DuplicateIntentError extends ConflictError {}
/** 409 `call_settled`: a cancel came after the call had settled; `call` is it. */
export class CallSettledError extends ConflictError {}
/** 503 (`unavailable`, `overloaded`) or another retryable status, when the budget ran out. */
export class UnavailableError extends ApiError {}

/** No answer settled the call within the retry budget and a look-up by key found nothing. */
export class RetryExhaustedError extends IdempotentToolError {
  constructor(key, attempts, lastError) {
    super(`no answer after ${attempts} attempt(s) (key ${JSON.stringify(key)}): ${lastError?.message ?? lastError}`, {
      cause: lastError,
    });
    this.key = key;
    this.attempts = attempts;
    this.lastError = lastError;
  }
}

const BY_CODE = {
  idempotency_conflict: IdempotencyConflictError,
  duplicate_intent: DuplicateIntentError,
  call_settled: CallSettledError,
  unavailable: UnavailableError,
  overloaded: UnavailableError,
};

const BY_STATUS = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
};

/** The class an answer with `status` and `code` is raised as. */
export function errorClass(status, code) {
  return (
    BY_CODE[code] ??
    BY_STATUS[status] ??
    (status >= 500 || status === 408 || status === 429 ? UnavailableError : ApiError)
  );
}
