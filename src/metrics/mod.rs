//! Metrics: counters, gauges and histograms kept in atomics, and their
//! rendering in the Prometheus text exposition format, version 0.0.4.
//!
//! The hot path only touches atomics: a handle (`Arc<Counter>`, ...) is looked
//! up once and kept, and `inc`/`observe` never lock. Locks are taken only to
//! add a new label set to a family and to render a scrape. The families this
//! service exports, with their names, are in [`service`].
//!
//! This module must never block a request on a scrape, and never export a
//! label value it was not given by the code: no header, key or args ever
//! becomes a label (their cardinality is unbounded and they may be secret).
//!
//! Map (this file holds no type): `series` the metrics in atomics and their
//! families; `registry` the families a process exports and the rendering;
//! `service` the families of this service; `approvals` those of approval
//! gates and their webhook; `operator` the operator's (paused tools,
//! re-runs, bulk jobs); `rates` the overview's history of calls created and
//! failed per second and failures by code, over a range, and the thread
//! that samples it into the database;
//! and, for the tests, `exposition`, the strict parser of a scrape that the
//! integration tests use too.

mod approvals;
pub mod operator;
pub mod rates;
mod registry;
mod series;
pub mod service;

pub use approvals::{ApprovalMetrics, DeliveryOutcome};
pub use rates::RateSampler;
pub use series::Counter;
pub use service::{
    CancelOutcome, DatabaseSnapshot, Metrics, ProbeError, Route, SubmitOutcome, ToolOutcome,
    Transport, WaitedOn,
};

#[cfg(test)]
#[path = "../../tests/it/support/exposition.rs"]
pub(crate) mod exposition;

#[cfg(test)]
mod tests;
