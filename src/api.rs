//! The HTTP API: routes, request validation, and the one mapping from every
//! failure to a status and a stable error code.
//!
//! `Api::handle` takes a parsed request and returns a response; it knows nothing
//! of sockets, so it can be tested without one. It validates everything before
//! anything is accepted: a request that gets `202` has been checked, and its call
//! is on disk. It never executes a tool itself — it hands new calls to the runner.

mod key_cache;

pub use key_cache::{KeyCache, DEFAULT_BUDGET_BYTES as DEFAULT_ANSWER_CACHE_BYTES};

use crate::chaos;
use crate::fingerprint::{as_integer, canonical_object, fingerprint_canonical};
use crate::http::{ClientProbe, ErrorCode, Request, Response};
use crate::input::{clip, parse_strict, quote};
use crate::runner::{Notifier, Runner};
use crate::store::{Call, CallStore, Created, NewCall, StoreError};
use crate::tools::ToolRegistry;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest `?wait=` a request may ask for.
const MAX_WAIT_SECS: f64 = 30.0;
/// Longest `Idempotency-Key`, in bytes.
const MAX_KEY_LEN: usize = 255;
/// Deepest JSON nesting accepted in a body.
const MAX_JSON_DEPTH: usize = 32;
/// Largest canonical `args`, in bytes.
const MAX_ARGS_BYTES: usize = 64 * 1024;

/// Every way a request can fail, each with one status and one code.
#[derive(Debug)]
pub enum ApiError {
    MissingKey,
    BadRequest(String),
    ArgsTooLarge(usize),
    /// The key is taken by another request: the key and its call's id.
    Conflict {
        key: String,
        call_id: String,
    },
    NotFound(String),
    MethodNotAllowed(&'static str),
    Store(StoreError),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Store(e)
    }
}

impl ApiError {
    /// The one place errors become responses. Internal causes go to the log,
    /// never to the client.
    fn into_response(self) -> Response {
        match self {
            ApiError::MissingKey => Response::from_error(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ),
            ApiError::BadRequest(message) => Response::from_error(ErrorCode::BadRequest, message),
            ApiError::ArgsTooLarge(size) => Response::from_error(
                ErrorCode::PayloadTooLarge,
                format!("args is {size} bytes; the limit is {MAX_ARGS_BYTES}"),
            ),
            ApiError::Conflict { key, call_id } => Response::from_error(
                ErrorCode::IdempotencyConflict,
                format!(
                    "same key, different fingerprint: key {:?} belongs to call {} with other tool or args",
                    key, call_id
                ),
            ),
            ApiError::NotFound(what) => {
                Response::from_error(ErrorCode::NotFound, format!("{what} not found"))
            }
            ApiError::MethodNotAllowed(allow) => Response::method_not_allowed(allow),
            ApiError::Store(StoreError::Unavailable(cause)) => {
                eprintln!("api: database unavailable: {cause}");
                Response::from_error(
                    ErrorCode::Unavailable,
                    "the database is busy or unavailable; retry with the same key",
                )
            }
            ApiError::Store(StoreError::Internal(cause)) => {
                eprintln!("api: internal error: {cause}");
                Response::from_error(ErrorCode::InternalError, "internal error")
            }
        }
    }
}

/// The routes, over one store and one runner.
pub struct Api {
    pub store: Arc<CallStore>,
    pub runner: Arc<Runner>,
    pub notifier: Arc<Notifier>,
    /// The tools calls may name, with their argument rules.
    pub tools: Arc<ToolRegistry>,
    /// Whether chaos hooks are accepted in `args`.
    pub chaos: bool,
    /// What this process knows about idempotency keys, within a byte budget.
    pub keys: KeyCache,
}

impl Api {
    pub fn handle(&self, req: &Request) -> Response {
        self.route(req).unwrap_or_else(ApiError::into_response)
    }

    fn route(&self, req: &Request) -> Result<Response, ApiError> {
        let method = req.method.as_str();
        let path = req.path.as_str();
        let allow = |allowed: &'static str| {
            if allowed.split(", ").any(|m| m == method) {
                Ok(())
            } else {
                Err(ApiError::MethodNotAllowed(allowed))
            }
        };
        match path {
            "/healthz" => {
                allow("GET")?;
                Ok(Response::json(200, &json!({"ok": true})))
            }
            "/stats" => {
                allow("GET")?;
                Ok(Response::json(200, &self.store.stats()?.to_json()))
            }
            "/v1/tool-calls" => {
                allow("POST")?;
                self.post_call(req)
            }
            "/v1/tools" => {
                allow("GET")?;
                Ok(Response::json(200, &self.tools.public_view()))
            }
            _ => {
                if let Some(key) = path.strip_prefix("/v1/tool-calls/by-key/") {
                    allow("GET")?;
                    let key = percent_decode(key).ok_or_else(|| {
                        ApiError::BadRequest(
                            "the key in the path is not valid percent-encoded UTF-8".into(),
                        )
                    })?;
                    let call = self.store.find_by_key(&key)?;
                    let call = call.ok_or_else(|| {
                        ApiError::NotFound(format!("call with key {}", quote(&key)))
                    })?;
                    self.respond_with_call(call, wait_param(req)?, &req.client)
                } else if let Some(call_id) = path.strip_prefix("/v1/tool-calls/") {
                    allow("GET")?;
                    let call = self.store.get(call_id)?;
                    let call =
                        call.ok_or_else(|| ApiError::NotFound(format!("call {}", quote(call_id))))?;
                    self.respond_with_call(call, wait_param(req)?, &req.client)
                } else {
                    Err(ApiError::NotFound(format!("path {}", quote(path))))
                }
            }
        }
    }

    /// `POST /v1/tool-calls`: validate, then create-or-get under the key.
    fn post_call(&self, req: &Request) -> Result<Response, ApiError> {
        let key = idempotency_key(req)?;
        let wait = wait_param(req)?;
        let body = parse_body(&req.body)?;
        let (tool, args) = tool_and_args(&body)?;
        let (tool_args, hooks) = chaos::split(args).map_err(ApiError::BadRequest)?;
        if let Some(hook) = chaos::names_a_hook(args) {
            if !self.chaos {
                return Err(ApiError::BadRequest(format!(
                    "args.{hook} is a chaos hook; the server must run with --chaos"
                )));
            }
        }
        let prepared = self
            .tools
            .prepare(tool, &tool_args)
            .map_err(ApiError::BadRequest)?;
        let quick = prepared.quick && hooks == chaos::Hooks::default();
        let canonical_args = canonical_object(&tool_args);
        let fingerprint = fingerprint_canonical(tool, &canonical_args);
        // What the worker runs: the tool's args plus any hooks, canonical too.
        let args_json = if hooks == chaos::Hooks::default() {
            canonical_args
        } else {
            canonical_object(args)
        };
        if args_json.len() > MAX_ARGS_BYTES {
            return Err(ApiError::ArgsTooLarge(args_json.len()));
        }
        let new = NewCall {
            idem_key: key.to_string(),
            fingerprint,
            tool: tool.to_string(),
            args_json,
            client_id: optional_string(&body, "client_id")?,
            seq: optional_integer(&body, "seq")?,
        };
        if let Some(body) = self.keys.settled(&new.idem_key, &new.fingerprint) {
            return Ok(Response::json_bytes(200, body));
        }
        let (idem_key, fingerprint) = (new.idem_key.clone(), new.fingerprint.clone());
        let call = match self.create_or_get(new)? {
            Created::Existing(call) if call.is_settled() => {
                let response = self.respond_with_call(call, None, &req.client)?;
                self.keys
                    .insert_settled(&idem_key, fingerprint, &response.body);
                return Ok(response);
            }
            Created::New(call) => {
                self.runner.submit(&call.call_id, &call.tool, quick);
                if let Some(delay) = hooks.delay_response {
                    std::thread::sleep(delay);
                }
                call
            }
            Created::RetryReset(call) => {
                // Rare; its stored args are not parsed here, so assume slow.
                self.runner.submit(&call.call_id, &call.tool, false);
                call
            }
            Created::Existing(call) => call,
            Created::Conflict(call) => {
                // The key is the client's own input: the message repeats at most
                // `input::MAX_QUOTED_BYTES` of it.
                return Err(ApiError::Conflict {
                    key: clip(&call.idem_key).to_string(),
                    call_id: call.call_id,
                });
            }
        };
        self.respond_with_call(call, wait, &req.client)
    }

    /// For a key known to have a row, the fast path first: a committed row with
    /// this key and fingerprint that needs no reset is the answer, without
    /// joining the write queue. Anything else — an unknown key, a conflict, a
    /// retryable failure — is decided inside the writer's transaction.
    fn create_or_get(&self, new: NewCall) -> Result<Created, ApiError> {
        if self.keys.has_row(&new.idem_key) {
            if let Some(existing) = self.store.find_by_key(&new.idem_key)? {
                if existing.fingerprint == new.fingerprint && !existing.is_retryable_failure() {
                    return Ok(Created::Existing(existing));
                }
            }
        }
        let idem_key = new.idem_key.clone();
        let created = self.store.create_or_get(new)?;
        self.keys.insert_has_row(&idem_key);
        Ok(created)
    }

    /// `200` with a terminal call, `202` while it is pending or running; with a
    /// wait, first hold until it is terminal, the wait is over, or the client
    /// has gone.
    fn respond_with_call(
        &self,
        call: Call,
        wait: Option<Duration>,
        client: &ClientProbe,
    ) -> Result<Response, ApiError> {
        let call = match wait {
            Some(wait) if !call.status.is_terminal() => self.wait_terminal(call, wait, client)?,
            _ => call,
        };
        let status = if call.status.is_terminal() { 200 } else { 202 };
        Ok(Response::json(status, &call.to_json()))
    }

    /// Re-read the call after every completion in this process and at least
    /// every 100 ms (another process may finish it) until it is terminal. A
    /// read borrows a pooled connection only while it runs, so a waiting
    /// request holds none. A client that has hung up ends the wait at once:
    /// its thread and connection slot are freed instead of idling up to 30 s.
    fn wait_terminal(
        &self,
        call: Call,
        wait: Duration,
        client: &ClientProbe,
    ) -> Result<Call, ApiError> {
        let deadline = Instant::now() + wait;
        let mut latest = call;
        let mut failure = None;
        self.notifier.wait_for(deadline, || {
            if client.gone() {
                return Some(());
            }
            match self.store.get(&latest.call_id) {
                Ok(Some(now)) => {
                    let done = now.status.is_terminal();
                    latest = now;
                    done.then_some(())
                }
                Ok(None) => None,
                Err(e) => {
                    failure = Some(e);
                    Some(())
                }
            }
        });
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(latest),
        }
    }
}

/// `Idempotency-Key`: exactly one header of 1–255 visible ASCII characters
/// (so no control character, no space). Two headers are refused rather than
/// one of them picked: a proxy and this server could pick differently.
fn idempotency_key(req: &Request) -> Result<&str, ApiError> {
    // Header names are stored lower-cased.
    let mut values = req
        .headers
        .iter()
        .filter(|(name, _)| name == "idempotency-key")
        .map(|(_, value)| value.as_str());
    let key = values.next().ok_or(ApiError::MissingKey)?;
    if values.next().is_some() {
        return Err(ApiError::BadRequest(
            "the Idempotency-Key header appears more than once; send it once".into(),
        ));
    }
    let visible = |b: u8| (0x21..=0x7e).contains(&b);
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(visible) {
        return Err(ApiError::BadRequest(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
        )));
    }
    Ok(key)
}

/// `?wait=SECONDS`, 0 to 30; other query parameters are ignored.
fn wait_param(req: &Request) -> Result<Option<Duration>, ApiError> {
    let Some(query) = &req.query else {
        return Ok(None);
    };
    let Some(raw) = query.split('&').find_map(|pair| pair.strip_prefix("wait=")) else {
        return Ok(None);
    };
    raw.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=MAX_WAIT_SECS).contains(s))
        .map(|s| Some(Duration::from_secs_f64(s)))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "wait must be a number of seconds from 0 to 30, not {}",
                quote(raw)
            ))
        })
}

/// The body as an object with only the known fields. Parsed strictly: a
/// member name repeated at any depth is refused, not resolved (see `input`).
fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value = parse_strict(body).map_err(|e| {
        // A data error is the strict parser's own refusal (a repeated name):
        // well-formed JSON that two readers could understand differently.
        let what = if e.is_data() {
            "ambiguous"
        } else {
            "not valid"
        };
        ApiError::BadRequest(format!("body is {what} JSON: {e}"))
    })?;
    if depth(&value) > MAX_JSON_DEPTH {
        return Err(ApiError::BadRequest(format!(
            "body nests deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    let Value::Object(map) = value else {
        return Err(ApiError::BadRequest("body must be a JSON object".into()));
    };
    if let Some(field) = map
        .keys()
        .find(|k| !["tool", "args", "client_id", "seq"].contains(&k.as_str()))
    {
        return Err(ApiError::BadRequest(format!(
            "{} is not a field of a tool call (expected: tool, args, client_id, seq)",
            quote(field)
        )));
    }
    Ok(map)
}

/// `tool` (required string) and `args` (object; absent or null means `{}`).
fn tool_and_args(body: &Map<String, Value>) -> Result<(&str, &Map<String, Value>), ApiError> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let tool = match body.get("tool") {
        Some(Value::String(tool)) => tool.as_str(),
        None | Some(Value::Null) => return Err(ApiError::BadRequest("tool is required".into())),
        Some(_) => return Err(ApiError::BadRequest("tool must be a string".into())),
    };
    let args = match body.get("args") {
        Some(Value::Object(args)) => args,
        None | Some(Value::Null) => EMPTY.get_or_init(Map::new),
        Some(_) => return Err(ApiError::BadRequest("args must be a JSON object".into())),
    };
    Ok((tool, args))
}

/// An optional text field (`client_id`): at most 255 bytes, and no control
/// character (C0, DEL, C1), which would be stored as-is and reach every log
/// line and terminal that shows the call.
fn optional_string(body: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= MAX_KEY_LEN && !s.chars().any(char::is_control) => {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::BadRequest(format!(
            "{field} must be a string of at most {MAX_KEY_LEN} bytes without control characters"
        ))),
    }
}

/// An optional integer field (`seq`): the numbers the fingerprint treats as
/// integers (`1`, `1.0`, `1e0`), as for every integer in `args`.
fn optional_integer(body: &Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_integer(v)
            .map(Some)
            .ok_or_else(|| ApiError::BadRequest(format!("{field} must be a 64-bit integer"))),
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Decode `%XX` escapes; `None` when an escape is malformed or the result is
/// not UTF-8. `+` stays `+`: this is a path, not a form.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("%E4%BD%A0").as_deref(), Some("你"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
    }

    #[test]
    fn json_depth_is_counted() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]})), 3);
    }

    #[test]
    fn body_fields_are_checked_and_named() {
        let err = |body: &str| match parse_body(body.as_bytes())
            .and_then(|b| tool_and_args(&b).map(|_| ()))
        {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(err("{").contains("not valid JSON"));
        assert!(err("[1]").contains("JSON object"));
        assert!(err(r#"{"args":{}}"#).contains("tool is required"));
        assert!(err(r#"{"tool":"charge","args":[1]}"#).contains("args must be"));
        assert!(err(r#"{"tool":"charge","extra":1}"#).contains("extra"));
        assert!(err(r#"{"tool":"charge","tool":"fail"}"#).contains("ambiguous JSON: member"));
        assert!(err(r#"{"tool":"x","args":{"a":1,"a":1}}"#).contains("more than once"));
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert!(err(&deep).contains("deeper"));
    }
}
