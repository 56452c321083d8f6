//! What the server and the service share about each connection: the
//! [`Handler`] the server calls once per request, and the [`Observer`] it
//! tells about connections and about the answers it gives on its own.
//!
//! Neither may block or panic the server: a handler that panics becomes a
//! `500`, and an observer's methods must be quick.

use crate::http::{Request, Response};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What the server calls for each request; it must not panic, but if it does the
/// connection answers `500 internal_error`.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// What the server tells the service beyond requests: connections opening
/// and closing (a gauge), and every answer it gives without the handler — a
/// request it could not read (`request` is `None`), a handler that panicked,
/// a connection over the cap; with the client's address when known — which the service may stamp (a request id)
/// and record (the access log, metrics) like its own. Each method must be
/// quick and must not panic; the defaults do nothing.
pub trait Observer: Send + Sync {
    fn connection_opened(&self) {}
    fn connection_closed(&self) {}
    fn own_answer(
        &self,
        _request: Option<&Request>,
        _peer: Option<SocketAddr>,
        _response: &mut Response,
        _elapsed: Duration,
    ) {
    }
}

/// The observer of a server nobody watches (the tools, the tests).
pub(super) struct Unobserved;

impl Observer for Unobserved {}
