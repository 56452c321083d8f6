//! A small blocking HTTP/1.1 client over `std::net::TcpStream`, shared by the
//! `client` binary, the chaos proxy, the bench and the tests.
//!
//! It speaks just enough HTTP to talk to this service and to proxies in front of it:
//! one request at a time per connection, bodies framed by `Content-Length`
//! (or read to EOF when the server closes). It never retries on its own; retry
//! policy lives above it, where the idempotency key is known.
//!
//! Map (this file holds no type): `connection` holds `HttpConnection`,
//! `HttpResponse`, `request_once` and the response reader; `retry` the policy
//! — `call_tool` (one key for every retry, retry only on timeouts, connection
//! errors, 429 and 503, look the call up by key before giving up) and
//! `poll_until_terminal`. Both are re-exported here.

mod connection;
mod retry;

pub use connection::{
    authority, encode_path_segment, read_next_response, read_response, request_once,
    HttpConnection, HttpResponse,
};

pub use retry::{
    bearer, call_tool, call_tool_with, is_terminal, poll_until_terminal, with_authorization,
    AttemptRecord, CallOptions, CallOutcome, CallResult, PollError,
};
