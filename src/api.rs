//! The HTTP API: the REST routes, request validation, and the one mapping
//! from every failure to a status and a stable error code.
//!
//! `Api::handle` takes a parsed request and returns a response; it knows nothing
//! of sockets, so it can be tested without one. It validates everything before
//! anything is accepted: a request that gets `202` has been checked, and its call
//! is on disk. It never executes a tool itself, and never creates or reads a
//! call but through the `Calls` service it shares with MCP (`crate::calls`).
//! `POST /mcp` is an `Endpoint` it is built with: this module does not know
//! MCP, nor MCP it.
//!
//! Every request but `/healthz` is authenticated first; the tenant it belongs
//! to scopes every key and call it names, and another tenant's call is
//! `404`, never `403`, so its existence does not leak. It must never put a
//! token, a header value or a call's args in a log line or an error body.
//!
//! Map (this file holds no type):
//! - `service`: `Api` and its constructor, what every handler holds;
//!   `health`: the last health check, kept for `/healthz`;
//! - `route`: `Route::parse`, the one reading of a method and path, and
//!   `ROUTES`, generated from the same table;
//! - `router`: `Api::route`, the order that matters and one `match` naming
//!   each route's handler; `POST /v1/tool-calls` and the reads of a call,
//!   `?wait=` included;
//! - `answer`: a call as REST answers it (`200`/`202`, written straight);
//! - `validate`: the key, `?wait=` and the body of a call request;
//! - `error`: `ApiError` and the one mapping from it to a response;
//! - `exchange`: wraps every request (request id, tenant, access log,
//!   metrics, the server's own answers);
//! - `operations`: `/healthz`, `/stats`, `/metrics`, `/openapi.yaml` and the
//!   audit timeline;
//! - `list`: `GET /v1/tool-calls`, the list and search, its cursor and the
//!   read routes' scope (`tenant=`);
//! - `overview`: `GET /v1/overview` and `GET /v1/nodes`;
//! - `query`: the query string of the read routes, decoded and checked;
//! - `cancel`: `POST /v1/tool-calls/{call_id}/cancel`;
//! - `approvals`: `POST /v1/tool-calls/{call_id}/approve` and `/deny`,
//!   `GET /v1/tool-calls/{call_id}/approval` and `GET /v1/approvals` (the
//!   queue);
//! - `rerun`: `POST /v1/tool-calls/{call_id}/rerun`;
//! - `bulk`: `POST /v1/bulk-actions`, `GET /v1/bulk-actions/{job_id}`;
//! - `pause`: `POST /v1/tools/{name}/pause` and `/resume`, and the tools'
//!   paused state in `GET /v1/tools`;
//! - `operate`: who may re-run, run a bulk job, pause (`may_operate`);
//! - `promise_check`: `GET /v1/verify`, `verify` on demand on a thread of
//!   its own, one at a time, bounded in time.
//!
//! `/ui` is answered by `crate::console` before authentication (its files
//! hold no data).

mod answer;
mod approvals;
mod bulk;
mod cancel;
mod error;
mod exchange;
mod health;
mod list;
mod operate;
mod operations;
mod overview;
mod pause;
mod promise_check;
mod query;
mod rerun;
mod route;
mod router;
mod service;
mod validate;

pub use error::ApiError;
pub use route::ROUTES;
pub use service::{Api, Endpoint, POLL_AFTER_SECS};
pub use validate::percent_decode;
