//! Retry and poll policy: the part of the client that knows about
//! idempotency. The seed's `call_tool` / `poll` (sections 12.8.1–12.8.4) in
//! Rust: one key for every attempt, retries only where the request may not
//! have reached the server (or the server asked us to come back), and a
//! by-key lookup before giving up so a lost response never forces a new key.
//! It never prints; each attempt becomes an `AttemptRecord` that the caller
//! prints or inspects.

use super::connection::{encode_path_segment, request_once, HttpResponse};
use crate::status::Status;
use serde_json::{json, Value};
use std::fmt;
use std::io;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The collection endpoint that creates calls.
const TOOL_CALLS_PATH: &str = "/v1/tool-calls";
/// Ceiling of the exponential backoff, as in the seed: `min(2^attempt * 0.1, 1.0)`.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Upper bound of the jitter added to every backoff, so clients that failed
/// together do not retry together.
const MAX_JITTER_MS: u64 = 50;
/// A `Retry-After` larger than this is capped: the client's own retry budget
/// (`--retries`) is the real limit, not the server's guess.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Polling starts fast (most calls finish in milliseconds) and slows down.
const FIRST_POLL_INTERVAL: Duration = Duration::from_millis(20);
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The socket timeout of one poll request; the poll deadline bounds the total.
const POLL_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What to call and how hard to try.
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// `http://host:port` of the service (or of a proxy in front of it).
    pub base: String,
    /// The idempotency key: generated once per logical request, reused by every retry.
    pub key: String,
    pub tool: String,
    /// The tool's arguments, a JSON object.
    pub args: Value,
    /// Socket timeout of each attempt (connect, write, read); `None` waits forever.
    pub timeout: Option<Duration>,
    /// Attempts after the first one.
    pub retries: u32,
    /// `?wait=SECONDS` on the POST: ask the server to hold the response until
    /// the call is terminal. The per-attempt `timeout` must be longer than this.
    pub wait: Option<u32>,
    /// After a 200/202, poll `GET /v1/tool-calls/{id}` until the call is terminal.
    pub poll: bool,
    /// Deadline of that polling, counted from when it starts.
    pub poll_timeout: Duration,
    /// The seed's deliberate mistake (section 12.8.2): attempt `i` uses key
    /// `K-i`, so the server sees unrelated requests and executes each of them.
    /// It exists only to reproduce duplicate effects.
    pub new_key_on_retry: bool,
    /// Optional `client_id` sent in the body (the server records it).
    pub client_id: Option<String>,
    /// A bearer token sent as `Authorization: Bearer ...` on every request
    /// (a server with `--auth-file` needs one).
    pub token: Option<String>,
}

impl CallOptions {
    /// Options with the seed's defaults: 1 s timeout, 3 retries, no polling.
    pub fn new(base: &str, key: &str, tool: &str, args: Value) -> CallOptions {
        CallOptions {
            base: base.to_string(),
            key: key.to_string(),
            tool: tool.to_string(),
            args,
            timeout: Some(Duration::from_secs(1)),
            retries: 3,
            wait: None,
            poll: false,
            poll_timeout: Duration::from_secs(10),
            new_key_on_retry: false,
            token: None,
            client_id: None,
        }
    }

    /// The key attempt `attempt` sends: always `key`, unless the caller asked
    /// for the deliberate mistake.
    fn key_for_attempt(&self, attempt: u32) -> String {
        if self.new_key_on_retry {
            format!("{}-{attempt}", self.key)
        } else {
            self.key.clone()
        }
    }

    fn post_path(&self) -> String {
        match self.wait {
            Some(seconds) => format!("{TOOL_CALLS_PATH}?wait={seconds}"),
            None => TOOL_CALLS_PATH.to_string(),
        }
    }

    fn post_body(&self) -> Vec<u8> {
        let mut body = json!({"tool": self.tool, "args": self.args});
        if let Some(client_id) = &self.client_id {
            body["client_id"] = json!(client_id);
        }
        body.to_string().into_bytes()
    }
}

/// One line of evidence: what a single attempt (or the by-key lookup) saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 0 for the first POST; the by-key lookup has `lookup: true` and the next number.
    pub attempt: u32,
    /// The key this attempt sent.
    pub key: String,
    /// Whether this was `GET /by-key/{key}` rather than a POST.
    pub lookup: bool,
    /// The HTTP status, when a response arrived.
    pub http: Option<u16>,
    /// The transport error, when no response arrived (`timed out`, ...).
    pub error: Option<String>,
    pub call_id: Option<String>,
    /// The call's status in the response, if it carried a call.
    pub status: Option<String>,
    /// The error code of an error response (`idempotency_conflict`, ...).
    pub code: Option<String>,
    /// The answer carried `Idempotent-Replayed: true`: the call an earlier
    /// request with this key made (not printed in the attempt line).
    pub replayed: bool,
}

impl AttemptRecord {
    fn from_response(attempt: u32, key: &str, lookup: bool, response: &HttpResponse) -> Self {
        let body = response.json();
        let text = |v: &Value| v.as_str().map(str::to_string);
        AttemptRecord {
            attempt,
            key: key.to_string(),
            lookup,
            http: Some(response.status),
            error: None,
            call_id: text(&body["call_id"]),
            status: text(&body["status"]),
            code: text(&body["error"]["code"]),
            replayed: response
                .header("idempotent-replayed")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        }
    }

    fn from_error(attempt: u32, key: &str, lookup: bool, error: &io::Error) -> Self {
        AttemptRecord {
            attempt,
            key: key.to_string(),
            lookup,
            http: None,
            error: Some(describe_io_error(error)),
            call_id: None,
            status: None,
            code: None,
            replayed: false,
        }
    }

    /// The line format of section 12.11.3:
    /// `{"attempt":0,"error":"timed out","key":"..."}` or
    /// `{"attempt":1,"http":202,"key":"...","call_id":"...","status":"..."}`.
    pub fn to_json(&self) -> Value {
        let mut line = serde_json::Map::new();
        line.insert("attempt".into(), json!(self.attempt));
        if self.lookup {
            line.insert("lookup".into(), json!("by-key"));
        }
        if let Some(http) = self.http {
            line.insert("http".into(), json!(http));
        }
        if let Some(error) = &self.error {
            line.insert("error".into(), json!(error));
        }
        line.insert("key".into(), json!(self.key));
        for (name, value) in [
            ("call_id", &self.call_id),
            ("status", &self.status),
            ("code", &self.code),
        ] {
            if let Some(value) = value {
                line.insert(name.into(), json!(value));
            }
        }
        Value::Object(line)
    }
}

/// How a `call_tool` ended.
#[derive(Debug, Clone)]
pub enum CallResult {
    /// The server returned (or the lookup found) this call; with `poll`, it is
    /// the last state seen while polling, terminal unless the poll deadline passed.
    Call(Value),
    /// The server answered with a status that retrying cannot change
    /// (400, 404, 409, 422, 500, ...): returned at once.
    Rejected { http: u16, body: Value },
    /// Every attempt failed and the by-key lookup found nothing.
    Exhausted { last_error: String },
}

/// Everything `call_tool` saw: one record per attempt, then the result.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub attempts: Vec<AttemptRecord>,
    pub result: CallResult,
}

impl CallOutcome {
    /// The final call, when there is one.
    pub fn call(&self) -> Option<&Value> {
        match &self.result {
            CallResult::Call(call) => Some(call),
            _ => None,
        }
    }

    /// The final call's status (`succeeded`, `failed`, `pending`, `running`).
    pub fn status(&self) -> Option<&str> {
        self.call().and_then(|call| call["status"].as_str())
    }

    /// True only when the call ended `succeeded`: the client binary's exit 0.
    pub fn succeeded(&self) -> bool {
        self.status() == Some("succeeded")
    }

    /// The last line the client prints: the call, the server's error body, or
    /// `{"error":{"code":"retry_exhausted",...}}`.
    pub fn final_json(&self, opts: &CallOptions) -> Value {
        match &self.result {
            CallResult::Call(call) => call.clone(),
            CallResult::Rejected { body, .. } => body.clone(),
            CallResult::Exhausted { last_error } => json!({"error": {
                "code": "retry_exhausted",
                "message": format!(
                    "no response after {} attempts and no call found by key: {last_error}",
                    opts.retries + 1
                ),
                "key": opts.key,
            }}),
        }
    }
}

/// What one POST told the retry loop to do next.
enum Verdict {
    /// A call came back: stop retrying.
    Done(Value),
    /// A final refusal: stop retrying, report it.
    Reject(u16, Value),
    /// Try again after this pause (the server's `Retry-After`, or our backoff).
    Retry(Option<Duration>),
}

/// Call a tool with the seed's retry policy and return every attempt's record.
pub fn call_tool(opts: &CallOptions) -> CallOutcome {
    call_tool_with(opts, &mut |_| {})
}

/// `call_tool`, reporting each attempt to `on_attempt` as it happens (the
/// client binary prints them live, so a hung attempt is visible).
pub fn call_tool_with(
    opts: &CallOptions,
    on_attempt: &mut dyn FnMut(&AttemptRecord),
) -> CallOutcome {
    let mut attempts = Vec::new();
    let mut record = |r: AttemptRecord, attempts: &mut Vec<AttemptRecord>| {
        on_attempt(&r);
        attempts.push(r);
    };
    let body = opts.post_body();
    let mut last_error = String::from("no attempt made");
    for attempt in 0..=opts.retries {
        let key = opts.key_for_attempt(attempt);
        let verdict = match post_once(opts, &key, &body) {
            Ok(response) => {
                record(
                    AttemptRecord::from_response(attempt, &key, false, &response),
                    &mut attempts,
                );
                last_error = format!("HTTP {}", response.status);
                judge_response(&response)
            }
            Err(error) => {
                let r = AttemptRecord::from_error(attempt, &key, false, &error);
                last_error = r.error.clone().unwrap_or_default();
                record(r, &mut attempts);
                Verdict::Retry(None)
            }
        };
        match verdict {
            Verdict::Done(call) => {
                let call = finish_call(opts, call);
                return CallOutcome {
                    attempts,
                    result: CallResult::Call(call),
                };
            }
            Verdict::Reject(http, body) => {
                return CallOutcome {
                    attempts,
                    result: CallResult::Rejected { http, body },
                };
            }
            Verdict::Retry(server_pause) if attempt < opts.retries => {
                thread::sleep(server_pause.unwrap_or_else(|| backoff(attempt)));
            }
            Verdict::Retry(_) => {}
        }
    }
    // No response carried a call (section 12.8.4): the request may still have
    // been executed. Ask by key before giving up, never invent a new key.
    let key = opts.key_for_attempt(opts.retries);
    let lookup_attempt = opts.retries + 1;
    match lookup_by_key(opts, &key) {
        Ok(response) => {
            record(
                AttemptRecord::from_response(lookup_attempt, &key, true, &response),
                &mut attempts,
            );
            if response.status == 200 && response.json()["call_id"].is_string() {
                let call = finish_call(opts, response.json());
                return CallOutcome {
                    attempts,
                    result: CallResult::Call(call),
                };
            }
        }
        Err(error) => record(
            AttemptRecord::from_error(lookup_attempt, &key, true, &error),
            &mut attempts,
        ),
    }
    CallOutcome {
        attempts,
        result: CallResult::Exhausted { last_error },
    }
}

fn post_once(opts: &CallOptions, key: &str, body: &[u8]) -> io::Result<HttpResponse> {
    request_once(
        &opts.base,
        "POST",
        &opts.post_path(),
        &with_authorization(&[("Idempotency-Key", key)], &bearer(opts.token.as_deref())),
        Some(body),
        opts.timeout,
    )
}

/// Sort a response into done / reject / retry. Only 429 and 503 are retried:
/// they say "not now" without having started anything. A 409 or 400 would
/// only repeat itself, and a 500 may have had effects a blind retry cannot see.
fn judge_response(response: &HttpResponse) -> Verdict {
    let body = response.json();
    match response.status {
        200..=299 if body["call_id"].is_string() => Verdict::Done(body),
        429 | 503 => Verdict::Retry(retry_after(response)),
        status => Verdict::Reject(status, body),
    }
}

/// After a call came back: poll it to a terminal state when asked to.
fn finish_call(opts: &CallOptions, call: Value) -> Value {
    if !opts.poll || is_terminal(&call) {
        return call;
    }
    let Some(call_id) = call["call_id"].as_str() else {
        return call;
    };
    let deadline = Instant::now() + opts.poll_timeout;
    match poll_until_terminal_as(&opts.base, opts.token.as_deref(), call_id, deadline) {
        Ok(done) => done,
        Err(stuck) => stuck.last_seen.unwrap_or(call),
    }
}

/// Whether a call JSON is in a state that will never change again.
pub fn is_terminal(call: &Value) -> bool {
    call["status"]
        .as_str()
        .and_then(|s| Status::parse(s).ok())
        .is_some_and(Status::is_terminal)
}

/// Why polling stopped without a terminal call.
#[derive(Debug, Clone)]
pub struct PollError {
    /// The last call JSON the server returned, if any poll got through.
    pub last_seen: Option<Value>,
    /// The last transport error or unexpected status.
    pub last_error: Option<String>,
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self
            .last_seen
            .as_ref()
            .and_then(|c| c["status"].as_str())
            .unwrap_or("unknown");
        write!(f, "poll deadline passed; last status {status}")?;
        if let Some(error) = &self.last_error {
            write!(f, ", last error: {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PollError {}

/// Poll `GET /v1/tool-calls/{call_id}` until the call is `succeeded` or
/// `failed`, or `deadline` passes (section 12.8.3: polling must be bounded).
/// Transport errors are tolerated until the deadline: the server may be
/// restarting after a crash, which is exactly when a client keeps asking.
pub fn poll_until_terminal(
    base: &str,
    call_id: &str,
    deadline: Instant,
) -> Result<Value, PollError> {
    poll_until_terminal_as(base, None, call_id, deadline)
}

/// `poll_until_terminal`, sending `token` as a bearer token.
fn poll_until_terminal_as(
    base: &str,
    token: Option<&str>,
    call_id: &str,
    deadline: Instant,
) -> Result<Value, PollError> {
    let authorization = bearer(token);
    let headers = with_authorization(&[], &authorization);
    let path = format!("{TOOL_CALLS_PATH}/{}", encode_path_segment(call_id));
    let mut failure = PollError {
        last_seen: None,
        last_error: None,
    };
    let mut interval = FIRST_POLL_INTERVAL;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(failure);
        }
        let timeout = remaining.min(POLL_REQUEST_TIMEOUT);
        match request_once(base, "GET", &path, &headers, None, Some(timeout)) {
            Ok(response) if response.status == 200 => {
                let call = response.json();
                if is_terminal(&call) {
                    return Ok(call);
                }
                failure.last_seen = Some(call);
            }
            Ok(response) => failure.last_error = Some(format!("HTTP {}", response.status)),
            Err(error) => failure.last_error = Some(describe_io_error(&error)),
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        thread::sleep(interval.min(remaining));
        interval = (interval * 2).min(MAX_POLL_INTERVAL);
    }
}

/// `GET /v1/tool-calls/by-key/{key}`: find a call whose creating response was lost.
fn lookup_by_key(opts: &CallOptions, key: &str) -> io::Result<HttpResponse> {
    let path = format!("{TOOL_CALLS_PATH}/by-key/{}", encode_path_segment(key));
    let authorization = bearer(opts.token.as_deref());
    let headers = with_authorization(&[], &authorization);
    request_once(&opts.base, "GET", &path, &headers, None, opts.timeout)
}

/// The `Authorization` value that sends `token`: `Bearer TOKEN`.
pub fn bearer(token: Option<&str>) -> Option<String> {
    token.map(|token| format!("Bearer {token}"))
}

/// `headers`, plus `Authorization` when there is one.
pub fn with_authorization<'a>(
    headers: &[(&'a str, &'a str)],
    authorization: &'a Option<String>,
) -> Vec<(&'a str, &'a str)> {
    let mut all = headers.to_vec();
    if let Some(value) = authorization {
        all.push(("Authorization", value));
    }
    all
}

/// The pause before retry number `attempt + 1`: `min(2^attempt * 0.1 s, 1 s)`
/// plus up to 50 ms of jitter.
fn backoff(attempt: u32) -> Duration {
    let exponential = Duration::from_millis(100).saturating_mul(1u32 << attempt.min(16));
    exponential.min(MAX_BACKOFF) + jitter()
}

/// 0–50 ms derived from the clock and the pid: no `rand` crate, but two clients
/// started in the same millisecond still differ by pid.
fn jitter() -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = u64::from(nanos ^ std::process::id().rotate_left(16));
    Duration::from_millis((mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % (MAX_JITTER_MS + 1))
}

/// The server's `Retry-After` in seconds (the delta form; dates are not used here).
fn retry_after(response: &HttpResponse) -> Option<Duration> {
    let seconds: f64 = response.header("retry-after")?.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(seconds).min(MAX_RETRY_AFTER))
}

/// A short, stable description of a transport error for the attempt lines.
/// Read timeouts surface as `WouldBlock` on Unix and `TimedOut` on Windows.
fn describe_io_error(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timed out".to_string(),
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::UnexpectedEof => "connection closed before a response".to_string(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            "connection reset".to_string()
        }
        _ => error.to_string(),
    }
}
