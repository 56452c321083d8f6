// idempotent-tool: a client for the idempotent-tool service. `Client` calls
// tools with one key per logical call and safe retries (retry.js); refusals are
// typed errors (errors.js); keys.js holds the key rule the AI SDK adapter
// (`idempotent-tool/ai`) derives keys by, on the service's canonical JSON.

export { Client, VERSION } from "./client.js";
export { canonical, fingerprint, sha256Hex } from "./canonical.js";
export { KEY_RULE_PREFIX, newKey, toolKey } from "./keys.js";
export { DEFAULT_RETRY } from "./retry.js";
export {
  ApiError,
  AuthenticationError,
  BadRequestError,
  CallSettledError,
  ConflictError,
  DuplicateIntentError,
  IdempotencyConflictError,
  IdempotentToolError,
  NotFoundError,
  PermissionDeniedError,
  RetryExhaustedError,
  UnavailableError,
} from "./errors.js";
