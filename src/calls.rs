//! The call path both transports share: one `Calls` service, held as an
//! `Arc<Calls>` by the REST routes (`api`) and by MCP (`mcp`), which owns
//! how a call is submitted, read (by id, by key, its audit timeline) and
//! waited for. A call sent by either transport goes through the same checks,
//! key cache, pushback, store, runner and metrics; only how an answer is
//! rendered, and how a refusal is said, is the transport's.
//!
//! It must never execute a tool, never answer with a call before that call
//! is committed, and never show one tenant another tenant's call: every read
//! names the tenant it is made for. It knows no transport but by the metrics
//! label a request carries (`Transport`), and renders nothing but the REST
//! answers its key cache keeps.
//!
//! Map (this file holds no type):
//! - `service`: `Calls`, its constructor, and the reads: a call by id or by
//!   key, its audit timeline, and the wait until it settles; and
//!   `last_progress`, a running call's last progress wherever it runs;
//! - `submit`: submit, in named steps — the settled answer already kept,
//!   create-or-get (with a worker reserved, created already claimed) or the
//!   guarded create under a business key, then the new call handed to the
//!   runner;
//! - `check`: a request checked and made into the row to create (chaos
//!   hooks, the tool's rules, the business key, the approval gate,
//!   canonical args, the fingerprint);
//! - `request`: `CallRequest`, `Submitted`, and the bounds both transports
//!   hold a request to;
//! - `pushback`: `--max-pending`, the bound on calls waiting for a worker;
//! - `cancel`: a call cancelled (pending: at once; running: its tool
//!   halted), and the bounded wait for a running one to end;
//! - `decide`: a waiting call approved (handed to the runner) or denied,
//!   and the reads of the approval queue and of a call's request;
//! - `operate`: the operator's doors — re-run a call, pause and resume a
//!   tool, bulk jobs, a filter's total, a call's effect — and why a pending
//!   call waits (`Wait`);
//! - `key_cache`: what this process knows about keys, and the settled
//!   answers kept for retries;
//! - `error`: `CallError`, every way the call path refuses.

mod cancel;
mod check;
mod decide;
mod error;
mod key_cache;
mod operate;
mod pushback;
mod request;
mod service;
mod submit;

pub use cancel::{CancelAnswer, DEFAULT_CANCEL_WAIT};
pub use decide::{by_person, MAX_QUEUE_PAGE};
pub use error::{store_refusal, CallError, CallRefusal};
pub use key_cache::{scoped_key, KeyCache, DEFAULT_BUDGET_BYTES as DEFAULT_ANSWER_CACHE_BYTES};
pub use request::{CallRequest, Submitted, MAX_KEY_LEN, MAX_WAIT_SECS};
pub use service::{last_progress, Bell, Calls, CallsOptions};
