//! `Exchange`: what one request turned out to be, as its access-log line
//! tells it — the tenant it was, the idempotency key it named, the call its
//! answer is about, and whether that call already existed. Whichever route
//! answers the request (REST or MCP) fills it in; the wrapper around the
//! routes reads it into the `AccessRecord` once the response exists.
//!
//! It holds only the fields an access line may show: never a header value
//! other than the checked key, a body or a query string.

use std::sync::Arc;

/// What a request turned out to be, for its access-log line.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The authenticated tenant; `None` when refused before that.
    pub tenant: Option<Arc<str>>,
    pub idem_key: Option<String>,
    /// The call the answer is about, when there is one.
    pub call_id: Option<String>,
    /// The answer is a call that already existed.
    pub replayed: bool,
}
