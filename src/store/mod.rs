//! `CallStore`: the only module that speaks SQL. It owns the `calls` state
//! machine, the lease and fencing rules, the unique constraints, recovery,
//! the schema and its migrations, and commits — on either backend.
//!
//! State machine: `pending → running → succeeded | failed`, and `failed` (when
//! its error says `retryable`) `→ pending` on a same-key retry; `running →
//! pending` with a `next_attempt_at` when a retryable failure has attempts
//! left (an automatic retry, claimed no earlier than that); `pending →
//! cancelled` at once, and `running → cancelled` once its cancel was asked
//! and the attempt stopped or ended short of a success (`cancel`); a gated
//! call starts `awaiting_approval` and becomes `pending` (approved) or
//! `denied` (denied, or its request expired), or `cancelled` (`approval`).
//! Every transition
//! is a conditional `UPDATE ... WHERE status = ...`; its row count decides who
//! wins, never an earlier `SELECT`.
//!
//! Files. The root holds what both backends share, and names neither
//! wing but here: `backend` (`Backend`, the one contract both implement,
//! each rule in its method's doc), `call_store` (the facade: it holds a
//! backend behind that contract and stamps each call's `expires_at`),
//! `model` (the types of the API, `Then`, `CallCounts`; the call statuses
//! are `crate::status`'s, re-exported here), `call_json` (a call as the API
//! shows it, as a tree or written straight), `counts` (what
//! the count tables hold: `/stats`, `/metrics` and the overview without
//! reading `calls`), `list` (`ListQuery`, and the plan both wings follow to
//! answer it from indexes), `error` (`StoreError`), `database` (which
//! backend a `--db` names), `db_schema` (`--db-schema`, the PostgreSQL
//! schema a deployment's tables live in), `ids` (call and effect ids, the
//! local clock), `options` (`StoreOptions`, `DueLimits`), `limits` (the
//! limits a tool's calls share across processes: `ToolLimit`, the token
//! bucket, `LimitedClaim`), `instance` (instance identity and the liveness
//! rules of recovery: `Reclaimable`; `Node`, what `GET /v1/nodes` shows),
//! `audit` (the audit events and their detail texts), `cancel`
//! (cancelling: its rules, `Cancel`, the steps a wing runs), `approval`
//! (approval gates: their rules, `Decision`, `Decided`, the webhook
//! outbox's `Notification`, the answers an MCP client gave), `gate` (what a
//! new gated call carries: `Gate`, `Approvers`), `rerun` (re-running a
//! failed or cancelled call: its rules, `Rerun`, the steps a wing runs),
//! `paused` (paused tools), `bulk_job` (bulk jobs: the rules, `BulkJob`, a
//! batch's `Step`), `readings` (the overview's history, and its
//! arithmetic), `operator` (`Operator`, the second contract: re-run, pause,
//! bulk jobs, totals, readings), `wake`
//! (another node's news), `business_key` (the second layer's types),
//! `mixed` (the bench's mixed million, row by row; feature `testing`)
//! and `verify` (the offline checker's invariants and report); this file
//! is the map, and the one dispatch from a database to its wing
//! (`open_backend`, `verify_backend`, `tools_outside_backend`; the bench's
//! `bulk::insert_mixed_calls`).
//!
//! The wings, each with its own map and one `open`, neither importing the
//! other (`tests/wings.rs` holds that): `sqlite/` (the embedded default: a
//! group-commit writer thread, its syncer and checkpointer, a read pool)
//! and `postgres/` (for several nodes on one database: a connection pool,
//! `LISTEN`/`NOTIFY` wake-ups). Each has `sql` (the state machine),
//! `schema`, `instances`, `business_key`, `approval`, `retention`, `report_reads`,
//! `counts` (the count tables and their triggers), `list` (the list's
//! statements), `bulk` (the bench's loaders), `limits` and `verify`, in
//! its own SQL.
//!
//! Idempotency keys are scoped by tenant: every lookup the API makes names
//! the tenant, and another tenant's call reads as absent.
//!
//! **The boundary.** The public API takes and returns the types in `model`,
//! never a `rusqlite` or `postgres` type, so the rest of the crate does not
//! know which backend it talks to. What any backend must guarantee (and
//! `Backend` says method by method):
//! - `calls (tenant, idem_key)` and `effects.call_id` are unique constraints,
//!   enforced by the database, not by a prior read;
//! - every transition is one conditional update whose affected-row count
//!   decides (`claim`: `pending` and due, or `running` with an expired lease;
//!   the fenced `succeed`/`fail`/`retry_later` and a lease's extension:
//!   `running` under the same `attempt`; the retry reset: `failed`); an
//!   effect row commits in the same transaction as its call's `succeeded`;
//! - nothing is answered before the transaction that wrote it is durable, and
//!   an error answer means "retry with the same key", never "it happened";
//! - lease times are wall-clock seconds comparable across processes (on
//!   PostgreSQL, the database's clock, so the nodes' clocks do not matter).
//!
//! This module never runs a tool, and never holds a transaction open across
//! anything but SQL.

mod approval;
mod audit;
mod backend;
mod bulk_job;
mod business_key;
mod call_json;
mod call_store;
mod cancel;
mod counts;
mod database;
mod db_schema;
mod error;
mod gate;
mod ids;
mod instance;
mod limits;
mod list;
#[cfg(any(test, feature = "testing"))]
mod mixed;
mod model;
mod operator;
mod options;
mod paused;
mod postgres;
mod readings;
mod rerun;
mod sqlite;
#[cfg(test)]
mod tests;
pub mod verify;
mod wake;

pub use approval::{
    input_answers, Approval, Approvers, Decided, Decision, Delivery, Gate, Notification, Ruling,
    Source, Verdict, Waiting, APPROVAL_REQUESTED, MAX_DECISION_REASON_BYTES,
};
pub use bulk_job::{
    filter_from_json, filter_to_json, BulkAction, BulkJob, JobCreated, JobState, NewBulkJob, Step,
    MAX_BULK_CALLS,
};
pub use business_key::{BusinessKey, Guarded, IntentLedger};
pub use call_store::CallStore;
pub use cancel::{Cancel, MAX_CANCEL_REASON_BYTES};
pub use counts::{CountRow, Counts, FailureRow, Totals};
pub use database::{Database, DatabaseRef, DatabaseUrlError};
pub use db_schema::{DbSchema, DB_SCHEMA_RULE, DEFAULT_DB_SCHEMA};
pub use error::{Cause, StoreError};
pub use ids::{call_id_of_effect, effect_id_for, now};
pub use instance::{owner_name, Instance, Node, DEAD_AFTER, HEARTBEAT_EVERY, NODES_LISTED};
pub use limits::{Limit, LimitedClaim, Rate, ToolLimit};
pub use list::{next_millisecond, ListPage, ListQuery, Total, TOTAL_CAP};
pub use model::{
    AuditEvent, Backlog, Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Health,
    Lease, LeaseHeld, NewCall, NewEffect, Purged, Retention, RetryDelay, Scope, Stats, Then,
    ToolAtRelease, WriterStats,
};
pub use operator::{Effect, StepPlan};
pub use options::{
    DueLimits, PgTimeouts, StoreOptions, DEFAULT_PG_OPERATION_TIMEOUT, DEFAULT_POOL_SIZE,
};
pub use paused::{PausedTool, Toggled};
pub use postgres::PG_SCHEMA_VERSION;
pub use postgres::{PgTarget, SslMode};
pub use readings::{Reading, TenantTotals, READING_EVERY};
pub use rerun::{Rerun, RerunRequest, MAX_RERUN_REASON_BYTES};
pub(crate) use sqlite::backup;
pub use sqlite::{RestoredCopy, LEDGER_SQL, MAX_READERS, SCHEMA_VERSION};

/// The bench's bulk loaders and its write-path comparison: for measurement
/// only, never on a database that serves anyone (see each wing's `bulk`).
#[cfg(any(test, feature = "testing"))]
pub mod bulk {
    pub use super::mixed::{MixedCalls, MixedRow};
    pub use super::sqlite::bulk::{insert_succeeded_charges, strip_console_writes, BulkCharge};
    use super::{Database, StoreError};

    /// `mix` into the database `db` names (its schema must exist).
    pub fn insert_mixed_calls(db: &Database, mix: &MixedCalls) -> Result<(), StoreError> {
        match db {
            Database::Sqlite(path) => super::sqlite::bulk::insert_mixed(path, mix),
            Database::Postgres(target) => super::postgres::bulk::insert_mixed(target, mix),
        }
    }
}

/// The list's statements, for the tests that read their plans.
#[cfg(any(test, feature = "testing"))]
pub mod list_sql {
    /// On SQLite.
    pub mod sqlite {
        pub use crate::store::sqlite::{
            ALL_IDS, ALL_IDS_FILTERED, ERROR_IDS, ERROR_IDS_FILTERED, GROUP_IDS,
            GROUP_IDS_FILTERED, PREFIX_COUNT,
        };
    }
    /// On PostgreSQL.
    pub mod postgres {
        pub use crate::store::postgres::{
            ALL_IDS, ALL_IDS_FILTERED, ERROR_IDS, ERROR_IDS_FILTERED, GROUP_IDS,
            GROUP_IDS_FILTERED, PREFIX_COUNT,
        };
    }
}
pub use crate::status::{Status, UnknownStatus};
pub use wake::{Wake, WakeHandler};

use backend::Backend;
use verify::{Report, VerifyError};

// Besides the `mod` lines and the re-exports above (the bench's `bulk` and
// the tests' `list_sql` among them), the one place the root names a wing:
// which backend a database is. Every operation of the service that starts
// from a `Database` goes through one of these three.

/// The backend `db` names, opened: its schema brought up to date and this
/// process registered.
fn open_backend(db: &Database, options: StoreOptions) -> Result<Box<dyn Backend>, StoreError> {
    match db {
        Database::Sqlite(path) => sqlite::open(path, options),
        Database::Postgres(target) => postgres::open(target, options),
    }
}

/// `verify` on the backend `db` names.
fn verify_backend(db: &Database, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    match db {
        Database::Sqlite(path) => sqlite::verify(path, effect_tools),
        Database::Postgres(target) => postgres::verify(target, effect_tools),
    }
}

/// `tools_outside` on the backend `db` names.
fn tools_outside_backend(db: &Database, known: &[&str]) -> Result<Vec<String>, VerifyError> {
    match db {
        Database::Sqlite(path) => sqlite::tools_outside(path, known),
        Database::Postgres(target) => postgres::tools_outside(target, known),
    }
}
