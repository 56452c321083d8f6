//! HTTP/1.1 message types, the request parser, and the response writer.
//!
//! STUB: the types below are the contract; the parser is being written.

use std::fmt;

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
}

impl Request {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response; the writer adds `Content-Length`, `Date`-free framing and `Connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON response with `Content-Type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// The error shape every failure uses: `{"error":{"code","message"}}`.
    pub fn error(status: u16, code: &str, message: impl fmt::Display) -> Response {
        Response::json(
            status,
            &serde_json::json!({"error": {"code": code, "message": message.to_string()}}),
        )
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}
