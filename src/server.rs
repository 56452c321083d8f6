//! STUB: accept loop and connection threads (being written).
use crate::http::{Request, Response};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

/// What the server calls for each request; it must not panic, but if it does the
/// connection answers `500 internal_error`.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// Size and time limits for every connection.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body: usize,
    /// A request's head (and then its body) must arrive within this.
    pub request_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body: 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// Serve forever on an already-bound listener.
pub fn serve(_listener: TcpListener, _handler: Handler, _limits: Limits) {
    todo!()
}
