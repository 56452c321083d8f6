//! `idempotent-tool verify --db FILE`: check every invariant the service
//! promises on a database file, and report counts and each violation.
//!
//! The invariants, each with the name a violation is reported under:
//!
//! | Invariant | Violation |
//! |---|---|
//! | SQLite's own structure is sound (`PRAGMA integrity_check`) | `integrity_check` |
//! | one call per `Idempotency-Key` (per tenant, when `calls` has a `tenant` column) | `duplicate_key` |
//! | at most one effect per call | `duplicate_effect` |
//! | every effect belongs to a `succeeded` call, or to one purged by key retention (`effects.call_purged_at`) | `effect_without_succeeded_call` |
//! | the effect of a `succeeded` call is its own: the `effect_id` the call stores (`eff_` + its 16 hex for a call made before effect ids had a random part, which stores none), same tool, a tool that writes effects | `effect_not_its_calls` |
//! | every `succeeded` call of a tool that writes effects has its effect | `succeeded_without_effect` |
//! | a `running` call holds a lease (`lease_until` and `owner`) | `running_without_lease` |
//! | `status` is one of `awaiting_approval`, `pending`, `running`, `succeeded`, `failed`, `cancelled`, `denied` | `unknown_status` |
//! | a call awaiting approval never ran and holds no lease (attempt 0, no `lease_until`, no `owner`) | `awaiting_holds_nothing` |
//! | a `denied` call never ran and has no effect | `denied_ran` |
//! | every approval request agrees with its call: open exactly while the call awaits approval, `denied` calls denied by it, the call's own fingerprint, no request without its call | `approval_agrees` |
//!
//! Which calls must have an effect is decided by the tool, because that is
//! what decides it in the service: `succeed` writes the `effects` row in the
//! same transaction as `succeeded` exactly when the tool's outcome carries an
//! effect, and that is so for every success of the tools in
//! `effect_tools` — the caller passes `tools::EFFECT_TOOLS` (`charge`,
//! `send_email`), or, for a server run with `--tools FILE`, what that file
//! declares (`tools::file::effect_tools`: every `http` and `command` tool,
//! whose executors record the downstream's answer as the effect) — and never
//! for the others (`sleep`, `fail`; a test in `tools` holds the list to
//! `Tool::run`). The store itself knows no tool. A
//! `running` call whose lease has expired is not a violation: it is what a
//! crash leaves, and recovery takes it back.
//!
//! Each backend reads everything read-only, in one snapshot, so the report
//! is consistent and safe to take beside running servers: `sqlite/verify.rs`
//! on a file, `postgres/verify.rs` on a database; `store/mod.rs` picks the
//! one the database names.
//!
//! This module only reads; it never repairs.
//!
//! Its files: `report.rs` (what a run found, and why a database could not
//! be read at all), `invariants.rs` (each invariant as a query, shared by
//! both backends).

mod invariants;
mod report;

use super::Database;

pub(in crate::store) use invariants::{
    approval_checks, business_key_check, invariant_checks, Spec,
};
pub(in crate::store) use report::MAX_EXAMPLES;
pub use report::{Check, Report, VerifyError};

/// Check every invariant on `db` (a SQLite file or a PostgreSQL database),
/// read-only, in one snapshot.
pub fn verify_database(db: &Database, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    super::verify_backend(db, effect_tools)
}

/// The tools the database's calls name that are not in `known`, sorted: a
/// caller that only knows the built-ins asks this first, because which of
/// those tools write effects is in the tools file the server ran with, and
/// without it every effect of theirs would look like a violation.
pub fn tools_outside_database(db: &Database, known: &[&str]) -> Result<Vec<String>, VerifyError> {
    super::tools_outside_backend(db, known)
}
