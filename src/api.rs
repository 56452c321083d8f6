//! The HTTP API: routes, request validation, and the one mapping from every
//! failure to a status and a stable error code.
//!
//! `Api::handle` takes a parsed request and returns a response; it knows nothing
//! of sockets, so it can be tested without one. It validates everything before
//! anything is accepted: a request that gets `202` has been checked, and its call
//! is on disk. It never executes a tool itself — it hands new calls to the runner.
//!
//! Every request but `/healthz` is authenticated first; the tenant it belongs
//! to scopes every key and call it names, and another tenant's call is
//! `404`, never `403`, so its existence does not leak. It must never put a
//! token, a header value or a call's args in a log line or an error body.
//!
//! Map (this file holds no type):
//! - `router`: `Api`, the routes (`ROUTES`), `POST /v1/tool-calls` and the
//!   answer with a call, `?wait=` included;
//! - `submit`: the one way a call is submitted, by this API and by `mcp`
//!   (create-or-get, the business key, `--max-pending` pushback);
//! - `validate`: the key, `?wait=` and the body of a call request;
//! - `error`: `ApiError` and the one mapping from it to a response;
//! - `key_cache`: the settled answers kept for retries;
//! - `exchange`: wraps every request (request id, tenant, access log,
//!   metrics, the server's own answers);
//! - `operations`: `/healthz`, `/stats`, `/metrics`, `/openapi.yaml` and the
//!   audit timeline.

mod error;
mod exchange;
mod key_cache;
mod operations;
mod router;
mod submit;
mod validate;

pub use error::ApiError;
pub use exchange::Exchange;
pub use key_cache::{scoped_key, KeyCache, DEFAULT_BUDGET_BYTES as DEFAULT_ANSWER_CACHE_BYTES};
pub use operations::HealthCache;
pub use router::{Api, POLL_AFTER_SECS, ROUTES};
pub(crate) use submit::{Submission, Submitted};
pub use validate::percent_decode;
pub(crate) use validate::{MAX_KEY_LEN, MAX_WAIT_SECS};
