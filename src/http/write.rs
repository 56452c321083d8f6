//! The response writer: a `Response` into HTTP/1.1 wire bytes.
//!
//! This file owns framing on the way out: the status line, `Content-Length`
//! (or, for a streamed body, `Transfer-Encoding: chunked`) and `Connection`. It must never let a handler's header break the response apart
//! or contradict the framing it chose, and never write a body where the status
//! forbids one.

use super::message::{Response, Version};
use super::streamed::StreamFraming;
use super::syntax::{is_field_value_byte, is_token};

/// What the writer must say about the connection and the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// The server will read another request on this connection.
    pub keep_alive: bool,
    /// The request's version: a kept-alive 1.0 connection must say so explicitly.
    pub request_version: Version,
    /// A response to HEAD: headers (with the body's length) but no body.
    pub head_only: bool,
}

/// Appends the wire form of `response` to `out`: status line, the handler's
/// headers, `Content-Length`, `Connection`, and the body.
///
/// Framing headers from the handler are dropped (the writer alone decides them),
/// and so is any header that would break the response apart (CR/LF, bad name).
pub fn write_response(out: &mut Vec<u8>, response: &Response, options: WriteOptions) {
    write_status_and_headers(out, response);
    let has_body = status_allows_body(response.status);
    if has_body {
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(out, response.body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    write_connection(out, options);
    out.extend_from_slice(b"\r\n");
    if has_body && !options.head_only {
        out.extend_from_slice(&response.body);
    }
}

/// Appends the head of a response whose body is streamed (`Response::stream`):
/// status line, the handler's headers, `Transfer-Encoding: chunked` when
/// `framing` is `Chunked` (HTTP/1.1), `Connection`. An `UntilClose` body
/// (HTTP/1.0) is ended by the close, so the head always says `close`.
pub fn write_streamed_head(
    out: &mut Vec<u8>,
    response: &Response,
    options: WriteOptions,
    framing: StreamFraming,
) {
    write_status_and_headers(out, response);
    let options = match framing {
        StreamFraming::Chunked => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            options
        }
        StreamFraming::UntilClose => WriteOptions {
            keep_alive: false,
            ..options
        },
    };
    write_connection(out, options);
    out.extend_from_slice(b"\r\n");
}

fn write_status_and_headers(out: &mut Vec<u8>, response: &Response) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(response.status));
    out.push(b' ');
    out.extend_from_slice(reason_phrase(response.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &response.headers {
        if is_writable_header(name, value) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

fn write_connection(out: &mut Vec<u8>, options: WriteOptions) {
    if !options.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if options.request_version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
}

/// RFC 9110 §6.4.1: 1xx, 204 and 304 responses never carry content.
fn status_allows_body(status: u16) -> bool {
    !(100..200).contains(&status) && status != 204 && status != 304
}

fn is_writable_header(name: &str, value: &str) -> bool {
    let framing = ["content-length", "transfer-encoding", "connection"];
    is_token(name.as_bytes())
        && !framing.iter().any(|f| name.eq_ignore_ascii_case(f))
        && value.bytes().all(is_field_value_byte)
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The reason phrase for a status line (informational only; clients ignore it).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        425 => "Too Early",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ErrorCode;

    fn written(response: &Response, keep_alive: bool, version: Version, head_only: bool) -> String {
        let mut out = Vec::new();
        let options = WriteOptions {
            keep_alive,
            request_version: version,
            head_only,
        };
        write_response(&mut out, response, options);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writer_frames_the_response() {
        let ok = Response::json(200, &serde_json::json!({"ok": true}));
        assert_eq!(
            written(&ok, true, Version::Http11, false),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"ok\":true}\n"
        );
        assert_eq!(
            written(&ok, false, Version::Http11, false),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"ok\":true}\n"
        );
        assert_eq!(
            written(&ok, true, Version::Http10, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n"
        );
        let busy = Response::from_error(ErrorCode::Unavailable, "x");
        assert!(written(&busy, false, Version::Http11, false).starts_with(&format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: {}\r\n",
            crate::http::RETRY_AFTER_SECS
        )));
    }

    #[test]
    fn writer_owns_framing_headers_and_drops_unsafe_ones() {
        let sneaky = Response {
            status: 204,
            headers: vec![
                ("Content-Length".into(), "99".into()),
                ("Transfer-Encoding".into(), "chunked".into()),
                ("X-Split".into(), "a\r\nSet-Cookie: x".into()),
                ("Bad Name".into(), "v".into()),
                ("X-Fine".into(), "v".into()),
            ],
            body: b"ignored".to_vec(),
            stream: None,
        };
        assert_eq!(
            written(&sneaky, true, Version::Http11, false),
            "HTTP/1.1 204 No Content\r\nX-Fine: v\r\n\r\n"
        );
    }

    #[test]
    fn a_streamed_head_announces_chunks_or_the_close() {
        let sse = Response::json(200, &serde_json::json!({}));
        let options = |keep_alive, request_version| WriteOptions {
            keep_alive,
            request_version,
            head_only: false,
        };
        let head = |options, framing| {
            let mut out = Vec::new();
            write_streamed_head(&mut out, &sse, options, framing);
            String::from_utf8(out).unwrap()
        };
        let cases = [
            (
                options(true, Version::Http11),
                StreamFraming::Chunked,
                "Transfer-Encoding: chunked\r\n\r\n",
            ),
            (
                options(false, Version::Http11),
                StreamFraming::Chunked,
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            ),
            (
                options(true, Version::Http10),
                StreamFraming::UntilClose,
                "Content-Type: application/json\r\nConnection: close\r\n\r\n",
            ),
        ];
        for (options, framing, tail) in cases {
            let written = head(options, framing);
            assert!(written.starts_with("HTTP/1.1 200 OK\r\n"), "{written}");
            assert!(written.ends_with(tail), "{written}");
            assert!(!written.contains("Content-Length"), "{written}");
        }
    }

    #[test]
    fn decimal_formatting() {
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
