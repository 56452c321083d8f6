// The service's REST API, as the console calls it: same origin only, the
// bearer token (if the operator gave one) in `Authorization`, never a
// cookie (`credentials: 'omit'`), nothing cached. Errors come back as
// `ApiError` with the service's stable code.

const TOKEN_KEY = 'idempotent-tool.token';

/** The token for this tab, or null (kept in sessionStorage only). */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** A refused request: its HTTP status and the service's error code. */
export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code || `http_${status}`;
    this.body = body || null;
  }
}

/** Listeners told when the service answers 401 (the token is missing or wrong). */
const onUnauthorized = new Set();

export function whenUnauthorized(listener) {
  onUnauthorized.add(listener);
}

/**
 * One request to the service. Resolves to `{status, body}` for 2xx answers;
 * rejects with `ApiError` otherwise (a 401 also tells the listeners, unless
 * `quiet`: the sign-in's own probes). `signal` aborts it (a poll giving up);
 * `headers` adds to the request's (an `Idempotency-Key`).
 */
export async function request(method, path, body, {quiet = false, signal, headers: extra = {}} = {}) {
  const headers = Object.assign({Accept: 'application/json'}, extra);
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
      redirect: 'error',
      signal,
    });
  } catch (e) {
    throw new ApiError(0, 'network', `the service did not answer (${e.message})`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (_) {
    json = null;
  }
  if (response.ok) return {status: response.status, body: json};
  const error = json && json.error ? json.error : {};
  const failure = new ApiError(response.status, error.code, error.message, json);
  if (response.status === 401 && !quiet) onUnauthorized.forEach((listener) => listener(failure));
  throw failure;
}

/** GET `path`, the body only; `signal` aborts it. */
export async function get(path, signal) {
  return (await request('GET', path, undefined, {signal})).body;
}

/**
 * The `tenant` parameter of a read, the same on every page: an admin's is
 * `?tenant=` of the page if given, else every tenant (`*`); a tenant's is
 * its own (none sent).
 */
export function scope(params, who) {
  return who.admin ? params.get('tenant') || '*' : null;
}

/** A query string from an object; arrays repeat the name; empty values are left out. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== null && v !== undefined && v !== '') q.append(name, v);
    }
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** A path segment, percent-encoded (call ids are safe; keys may not be). */
export function segment(value) {
  return encodeURIComponent(value);
}
