//! The HTTP/1.1 messages: a parsed `Request` (with its `Version` and the
//! `ClientProbe` that says whether its client is still there) and a
//! `Response` (its body whole, or `Streamed`), with the one way an error becomes a response
//! (`Response::from_error`) and the one `Retry-After` value.
//!
//! This file owns what a message holds, never how it is read or written: the
//! parser fills a `Request`, `write` frames a `Response`. It must never build
//! an error body any other way than `from_error*`, so that every failure has
//! the one shape and the headers its code promises.

use super::error_code::ErrorCode;
use super::streamed::{Sink, Streamed};
use std::fmt;
use std::sync::Arc;

/// The protocol version of a request; it decides keep-alive defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// One parsed request, body already de-chunked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The raw request-target, e.g. `/v1/tool-calls/by-key/a%20b?wait=1`.
    pub target: String,
    /// The target before `?`, not percent-decoded.
    pub path: String,
    /// The target after the first `?`, if any, not decoded.
    pub query: Option<String>,
    pub version: Version,
    /// Header names lower-cased, values trimmed, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the client is still there (see `ClientProbe`).
    pub client: ClientProbe,
    /// The connection's peer (set by the server; `None` without a socket).
    pub peer: Option<std::net::SocketAddr>,
}

impl Request {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header (names are stored lower-case), in arrival order.
    pub fn header_values<'a>(
        &'a self,
        lower_name: &'a str,
    ) -> impl DoubleEndedIterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == lower_name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection may carry another request after this one
    /// (RFC 9112 §9.3): HTTP/1.1 persists unless `Connection: close`; HTTP/1.0
    /// only with `Connection: keep-alive`, and never when it used
    /// Transfer-Encoding, which 1.0 framing cannot be trusted with (§6.1).
    pub fn keep_alive(&self) -> bool {
        let has_token = |token: &str| {
            self.header_values("connection")
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if has_token("close") {
            return false;
        }
        match self.version {
            Version::Http11 => true,
            Version::Http10 => {
                has_token("keep-alive") && self.header_values("transfer-encoding").next().is_none()
            }
        }
    }
}

/// Asks whether the client that sent a request is still connected, so a
/// handler that holds a request open (`?wait=`) can stop for a client that
/// has hung up. The server fills it in from the connection; a request made
/// without a socket (unit tests, the bench's run without HTTP) has none, and
/// its client is taken as present. Not part of the message: two requests with
/// different probes are still equal.
#[derive(Clone, Default)]
pub struct ClientProbe(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl ClientProbe {
    /// A probe that calls `gone`; it must be cheap and must not block.
    pub fn new(gone: impl Fn() -> bool + Send + Sync + 'static) -> ClientProbe {
        ClientProbe(Some(Arc::new(gone)))
    }

    /// True once the client is known to have gone.
    pub fn gone(&self) -> bool {
        self.0.as_ref().is_some_and(|gone| gone())
    }
}

impl fmt::Debug for ClientProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ClientProbe(connected)"
        } else {
            "ClientProbe(none)"
        })
    }
}

impl PartialEq for ClientProbe {
    fn eq(&self, _: &ClientProbe) -> bool {
        true
    }
}

impl Eq for ClientProbe {}

/// Seconds an `unavailable` answer asks the client to wait (`Retry-After`):
/// a locked or full database and a full connection table are seconds-long
/// conditions, and the client's retry policy adds its own backoff on top.
pub const RETRY_AFTER_SECS: u64 = 1;

/// A response; the writer adds `Content-Length`, `Date`-free framing and `Connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A body produced while it is sent (`Streamed`), written in chunks
    /// after the head; `body` is then empty and unused.
    pub stream: Option<Streamed>,
}

impl Response {
    /// A JSON response with `Content-Type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> Response {
        Response::json_bytes(status, body.to_string().into_bytes())
    }

    /// A JSON response from an already-serialized body. Every JSON body ends
    /// with a newline, as a text document does: `curl` then leaves the shell
    /// prompt on a line of its own, and line-reading tools see a whole line.
    pub fn json_bytes(status: u16, mut body: Vec<u8>) -> Response {
        if body.last() != Some(&b'\n') {
            body.push(b'\n');
        }
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
            stream: None,
        }
    }

    /// A response whose body `produce` pushes, piece by piece, once the head
    /// is out (the server frames each piece as a chunk and sends it at once).
    pub fn streamed(
        status: u16,
        headers: Vec<(String, String)>,
        produce: impl FnOnce(&mut dyn Sink) + Send + 'static,
    ) -> Response {
        Response {
            status,
            headers,
            body: Vec::new(),
            stream: Some(Streamed::new(produce)),
        }
    }

    /// The one way an error becomes a response: the code's status, the shape
    /// every failure uses (`{"error":{"code","message"}}`), and the headers the
    /// code promises. `unavailable` always says when to come back, because the
    /// client's retry policy honours `Retry-After`. A 405 comes from
    /// `method_not_allowed`, which knows what to put in `Allow`.
    pub fn from_error(code: ErrorCode, message: impl fmt::Display) -> Response {
        Response::from_error_naming(code, message, None)
    }

    /// `from_error`, with the call the error is about in `error.call_id`
    /// (a `409`: the call that owns the key).
    pub fn from_error_naming(
        code: ErrorCode,
        message: impl fmt::Display,
        call_id: Option<&str>,
    ) -> Response {
        let mut error = serde_json::json!({"code": code.as_str(), "message": message.to_string()});
        if let Some(call_id) = call_id {
            error["call_id"] = call_id.into();
        }
        let mut body = serde_json::Map::new();
        body.insert("error".into(), error);
        Response::error_body(code, body)
    }

    /// `from_error`, with more members in `error` (`about`: `call_id`,
    /// `status`) and beside it (`beside`: the call a `409 call_settled`
    /// is about); neither can replace `code`, `message` or `error`.
    pub fn from_error_about(
        code: ErrorCode,
        message: impl fmt::Display,
        about: serde_json::Map<String, serde_json::Value>,
        beside: serde_json::Map<String, serde_json::Value>,
    ) -> Response {
        let mut error = about;
        error.insert("code".into(), code.as_str().into());
        error.insert("message".into(), message.to_string().into());
        let mut body = beside;
        body.insert("error".into(), serde_json::Value::Object(error));
        Response::error_body(code, body)
    }

    /// `from_error`, with more members beside `error` in the body
    /// (`/healthz`'s `ok` and `checks`); `beside` cannot replace `error`.
    pub fn from_error_beside(
        code: ErrorCode,
        message: impl fmt::Display,
        beside: serde_json::Map<String, serde_json::Value>,
    ) -> Response {
        let error = serde_json::json!({"code": code.as_str(), "message": message.to_string()});
        let mut body = beside;
        body.insert("error".into(), error);
        Response::error_body(code, body)
    }

    /// The status and the headers `code` promises, around a finished body.
    fn error_body(code: ErrorCode, body: serde_json::Map<String, serde_json::Value>) -> Response {
        let response = Response::json(code.status(), &serde_json::Value::Object(body));
        if code.asks_to_retry_later() {
            response.with_header("Retry-After", &RETRY_AFTER_SECS.to_string())
        } else {
            response
        }
    }

    /// `405 method_not_allowed` with the `Allow` header RFC 9110 §15.5.6
    /// requires; `allow` is the comma-separated list of methods the path takes.
    pub fn method_not_allowed(allow: &str) -> Response {
        Response::from_error(
            ErrorCode::MethodNotAllowed,
            format_args!("this path allows {allow}"),
        )
        .with_header("Allow", allow)
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the handler asked for the connection to close after this response.
    pub fn asks_to_close(&self) -> bool {
        self.headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("connection")
                && v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))
        })
    }
}

/// The interim response sent before reading a body the client is holding back.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
