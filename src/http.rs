//! HTTP/1.1 message types, the request parser, and the response writer.
//!
//! This module owns the translation between bytes and messages (RFC 9112): it
//! decides where a request's head ends, how long its body is, and where the next
//! request on the connection starts, and it turns a `Response` into wire bytes.
//! It is pure: it never touches a socket, a clock or a thread, never panics on any
//! input, and never holds more than the `ParseLimits` allow. It must never guess
//! at framing: whenever two readings of the bytes are possible it reports an error
//! (which makes the server close the connection) instead of picking one.
//!
//! Map (everything public is re-exported here, so callers name `http::X`):
//!
//! - this file: the map, and the re-exports callers name (`http::X`); it
//!   holds no type.
//! - `message`: the message types (`Request`, `Response`, `Version`,
//!   `ClientProbe`), `RETRY_AFTER_SECS` and `CONTINUE_100`.
//! - `parsing`: what the parser's stages share, `ParseStatus` and `ParseLimits`.
//! - `error_code`: `ErrorCode`, the one table of every error code the service
//!   answers with, its status and its stable string.
//! - `parse_error`: `ParseError`, why a request was rejected, mapped to its code.
//! - `syntax`: byte classes and line ends from the RFC grammars.
//! - `head`: the request line and header section, and the framing they announce.
//! - `chunked`: the incremental chunked-body decoder.
//! - `parser`: `RequestParser`, the sans-IO state machine over head and body.
//! - `write`: `write_response`, the response writer (and the head of a
//!   streamed one).
//! - `streamed`: `Streamed`, a body produced while it is sent (an event
//!   stream), the `Sink` its producer pushes through, and its chunked
//!   framing on the way out.
//! - `forwarded`: `TrustedProxies`, which address a request came from
//!   (`X-Forwarded-For`, believed only from a `--trusted-proxy`).
//! - `origin`: which `Host` and `Origin` the server answers (the defence
//!   against DNS rebinding).

mod chunked;
mod error_code;
mod forwarded;
mod head;
mod message;
mod origin;
mod parse_error;
mod parser;
mod parsing;
mod streamed;
mod syntax;
mod write;

pub use chunked::{ChunkedDecoder, MAX_CHUNK_EXT_BYTES};
pub use error_code::ErrorCode;
pub use forwarded::{NotAnAddress, TrustedProxies};
pub use head::{parse_head, Framing, Head};
pub use message::{ClientProbe, Request, Response, Version, CONTINUE_100, RETRY_AFTER_SECS};
pub use origin::{BadName, OriginPolicy, Refusal};
pub use parse_error::ParseError;
pub use parser::{parse_request, Progress, RequestParser};
pub use parsing::{ParseLimits, ParseStatus};
pub use streamed::{sse_event, Closed, Producer, Sink, StreamFraming, Streamed, LAST_CHUNK};
pub use write::{reason_phrase, write_response, write_streamed_head, WriteOptions};

#[cfg(test)]
mod tests;
