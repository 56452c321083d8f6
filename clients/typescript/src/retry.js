// The retry rules (docs/clients.md), the same as the Python client's. One
// logical call has one key and every retry sends it. Retried: a transport
// failure (no connection, a reset, a timeout), 408, 429 and every 5xx but 501
// and 505. Never retried: any other 4xx (409, 400, 401, 403, 404). The pause is
// the server's Retry-After when it sent one, else a jittered exponential
// backoff; all retries of one call fit in `maxElapsedMs`.

export const DEFAULT_RETRY = Object.freeze({
  maxElapsedMs: 30_000,
  initialBackoffMs: 100,
  maxBackoffMs: 2_000,
  maxRetryAfterMs: 30_000,
});

/** The pause in ms before retry `retry` (0-based): Retry-After if any, else jittered backoff. */
export function pauseMs(policy, retry, retryAfterMs) {
  if (retryAfterMs !== null && retryAfterMs !== undefined) {
    return Math.min(retryAfterMs, policy.maxRetryAfterMs);
  }
  const ceiling = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** Math.min(retry, 30));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** Whether an error status may be retried with the same key. */
export function retryableStatus(status) {
  return status === 408 || status === 429 || (status >= 500 && status !== 501 && status !== 505);
}

/** Retry-After in ms: delta seconds or an HTTP date; null if absent or bad. */
export function parseRetryAfter(value) {
  if (value === null || value === undefined) return null;
  const text = value.trim();
  let ms = /^\d+(\.\d+)?$/.test(text) ? Number(text) * 1000 : Date.parse(text) - Date.now();
  if (Number.isNaN(ms)) return null;
  return Math.max(0, ms);
}
