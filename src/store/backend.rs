//! `Backend`: the one contract both backends implement, method by method.
//! Each method's doc is the rule every backend keeps, whatever SQL it speaks;
//! each wing's store (`sqlite/`, `postgres/`) implements it, and the facade
//! (`CallStore`) holds one of them behind it and adds only what is the same
//! on both (retention's `expires_at`, the conveniences built on these).
//!
//! The boundary it draws: every method takes and returns the store's own
//! types (`model`), never a `rusqlite` or `postgres` one. This file never
//! speaks SQL and imports neither wing.

use super::approval::{Approval, Decided, Decision, Delivery, Notification, Waiting};
use super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::cancel::Cancel;
use super::counts::Counts;
use super::error::StoreError;
use super::instance::{Instance, Node};
use super::limits::{LimitedClaim, ToolLimit};
use super::list::{ListPage, ListQuery};
use super::model::{
    AuditEvent, Backlog, Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Health,
    Lease, LeaseHeld, NewCall, NewEffect, Purged, RetryDelay, Scope, Stats, Then, ToolAtRelease,
};
use super::operator::Operator;
use super::options::DueLimits;
use super::verify::{Report, VerifyError};
use super::wake::WakeHandler;
use crate::metrics::Metrics;
use serde_json::Value;
use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a backend must do. The calls it returns carry no `expires_at`: the
/// facade stamps it. (`Any` lets a wing's own tests reach its store behind
/// a `CallStore`.)
/// Beside it, `Operator` (`operator.rs`): what an operator does beyond a
/// call's own path, each wing's in a file of its own.
pub(in crate::store) trait Backend: Any + Send + Sync + Operator {
    /// `sqlite` or `postgres`, for logs and the bench.
    fn name(&self) -> &'static str;

    /// Report every write batch to `metrics` from now on. A backend without
    /// batches of its own (PostgreSQL groups commits itself) reports nothing.
    fn report_to(&self, _metrics: Arc<Metrics>) {}

    /// This process's instance: its id goes into every owner it writes.
    fn instance(&self) -> &Instance;

    /// Tell other processes this one is alive (every `HEARTBEAT_EVERY`).
    fn heartbeat(&self) -> Result<(), StoreError>;

    /// What this process does when another node on the same database
    /// announces new pending work or completions (`wake`). A backend with no
    /// such channel (SQLite) ignores it: there, polling alone finds another
    /// process's work.
    fn on_wake(&self, _handler: WakeHandler) {}

    /// Mark this instance stopped and commit every write already queued;
    /// later operations are answered `Unavailable`. Idempotent.
    fn stop(&self);

    /// Create the key's call, or return the one it already has, decided by
    /// the database's `UNIQUE (tenant, idem_key)`, not by an earlier read.
    fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError>;

    /// `create_or_get`, guarded by a business key: a known idempotency key is
    /// answered as always (a retryable failure about to run again must hold
    /// the business key first); an unknown one takes the business key, then
    /// writes its call — or, if another live call holds the key, writes
    /// nothing and names that call (`Guarded::Duplicate`). The key's row is
    /// written in the same transaction as the call, so both exist or
    /// neither, and the partial unique index decides.
    fn create_or_get_guarded(&self, new: NewCall, key: BusinessKey) -> Result<Guarded, StoreError>;

    /// `create_or_get` for a caller with a worker free to run the call at
    /// once: a new call is created already `running` — attempt 1, leased to
    /// `owner` for `lease` from the backend's clock, its `created` and
    /// `claimed` audit rows in the same transaction — and its lease comes
    /// back; the lease is fenced and recovered like any claim's. A known key
    /// is answered exactly as `create_or_get` answers it, with no lease.
    /// Never for a tool `limits_in_database` names: its calls are claimed by
    /// `claim_limited` alone.
    fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError>;

    /// Take the lease on each call for one attempt, as one operation. Only
    /// one claimer can win a call: its conditional `UPDATE` matches a
    /// `pending` row, or a `running` row whose lease has expired and whose
    /// cancel was not asked, and its row count decides. The answers come in the order of `call_ids`.
    /// Never for a tool `limits_in_database` names, like `create_claimed`.
    fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError>;

    /// Claim due calls, oldest first, in one operation: no more than
    /// `limits.total`, and of each tool `limits.per_tool` names no more than
    /// its number — what the runner's poll claims for its free workers and
    /// its capped tools' free slots. Calls another claimer holds at that
    /// moment are skipped rather than waited for, so several nodes claiming
    /// at once each get different calls.
    /// The runner names each tool `limits_in_database` holds in `per_tool`
    /// at zero, so this claim never takes one.
    fn claim_due_within(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError>;

    /// The tools whose limits this backend holds in the database for every
    /// process on it (of `StoreOptions::limits`; see `limits`). Their calls
    /// must be claimed by `claim_limited` alone — never created claimed,
    /// never by `claim_many` or `claim_due_within` — or a claim elsewhere
    /// could pass the limit. None by default.
    fn limits_in_database(&self) -> Vec<ToolLimit> {
        Vec::new()
    }

    /// Claim due calls of the tools `limits_in_database` names, oldest first,
    /// within `limits` (`total` calls; of each tool in `per_tool`, no more
    /// than its number: this process's free slots or workers for it) and
    /// within each tool's shared limits: no more `running` than its
    /// `max_concurrency` counting every process's calls (a dead one's too,
    /// until recovery takes them back), and one token of its `rate` per
    /// claim, the bucket refilled by the database's clock. Claims of one tool
    /// are serialised across processes for the length of the claim, so two
    /// never spend the same room. A call left waiting stays `pending`.
    fn claim_limited(
        &self,
        _limits: &DueLimits,
        _owner: &str,
        _lease: Duration,
    ) -> Result<LimitedClaim, StoreError> {
        Ok(LimitedClaim::default())
    }

    /// Record success, fenced by the lease: the effect row (if the tool wrote
    /// one) and the `succeeded` update commit together, and only if this
    /// lease's attempt still owns the call; a lost lease leaves only a
    /// `stale_completion` audit row (`Completion::Stale`).
    /// `effects.call_id UNIQUE` is the last gate: however many attempts
    /// succeed, one call has at most one effect. `then` learns the outcome
    /// once it is durable; the backend may group the commit with others
    /// rather than wait for it here.
    fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect: Option<NewEffect>,
        then: Then<Completion>,
    );

    /// Record failure, fenced like `succeed_then`. A call whose cancel was
    /// asked ends `cancelled` instead (`Completion::Cancelled`), under the
    /// same fence and only with no effect row.
    fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>);

    /// Record a retryable failure that has attempts left: the call returns to
    /// `pending`, not to be claimed for `delay` (`next_attempt_at`), audited
    /// `retry_scheduled` (saying so when a `Retry-After` was capped);
    /// fenced like `fail_then`, and like it ends a call whose cancel was
    /// asked `cancelled` instead: it never runs again.
    fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: RetryDelay,
        then: Then<Completion>,
    );

    /// Extend leases whose tools are still running to `lease` from now, each
    /// only while its call is `running` under the lease's attempt, storing
    /// with each the progress its tool last reported (`progress[i]` for
    /// `leases[i]`; missing or `None`: the stored progress stays) in the same
    /// write. Returns, in order, whether each lease is still held: `false`
    /// means it was lost (taken over after it expired, or released), and
    /// extending it must stop.
    fn extend(
        &self,
        leases: &[Lease],
        progress: &[Option<CallProgress>],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError>;

    /// Record in the tenant's call `call_id`'s audit that a keyless MCP
    /// request was answered with it by its content key (`window_secs`, the
    /// content window): one `replayed_by_content` row under the call's
    /// current attempt. Returns whether the call was there to note it on.
    fn note_replay_by_content(
        &self,
        tenant: &str,
        call_id: &str,
        window_secs: u64,
    ) -> Result<bool, StoreError>;

    /// Record in the tenant's call `call_id`'s audit the answers (`answers`,
    /// a JSON object by key) its MCP client gave to its approval's
    /// questions: one `input_answered` row, written only while the call is
    /// `awaiting_approval` under `fingerprint`. Returns whether it was.
    fn note_input_answers(
        &self,
        tenant: &str,
        call_id: &str,
        fingerprint: &str,
        answers: &str,
    ) -> Result<bool, StoreError>;

    /// Give back a lease whose call this process did not complete when it
    /// stopped: the call returns to `pending` (audited `released`, with
    /// what was done to its `tool`) unless the lease was already lost, in
    /// which case nothing changes (`Stale`). A call whose cancel was asked
    /// ends `cancelled` instead (`Cancelled`).
    fn release(&self, lease: &Lease, tool: &ToolAtRelease) -> Result<Completion, StoreError>;

    /// Return `running` calls whose lease has expired, or whose owner's process
    /// is gone, to `pending`, and name them. A live owner's leases are left
    /// alone: it may still be executing, and the effect would then run twice.
    /// So are `running_here`: the leases this process's own workers hold on
    /// tools running now, even once lapsed (a write stall let them lapse; the
    /// next extension renews them). `Reclaimable` judges each call. A call
    /// whose cancel was asked is taken back to `cancelled` instead (its
    /// attempt may have run; no effect was recorded), and named too.
    fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError>;

    /// Cancel `tenant`'s call by the rules of `store::cancel`: a `pending`
    /// one (new, or waiting for a retry) becomes `cancelled` at once, so no
    /// claim can take it; a `running` one has its cancel recorded (when, why,
    /// and a `cancel_requested` audit row naming who asked) for its owner to
    /// stop it — a backend that can reach the other nodes tells them at once;
    /// a settled or unknown call is left alone. Another tenant's call reads
    /// as absent. Idempotent: a second cancel finds what the first left.
    fn cancel(
        &self,
        tenant: &str,
        call_id: &str,
        reason: Option<&str>,
    ) -> Result<Cancel, StoreError>;

    /// Decide `call_id`'s approval request by the rules of
    /// `store::approval`, in `tenant`'s scope (`None`: any tenant's, for an
    /// admin): one conditional update — the call still `awaiting_approval`
    /// under the fingerprint the decider reviewed, its request open (and
    /// open to the client, for a client's decision) — whose row count
    /// decides; the request closed and the audit row written in the same
    /// transaction. A backend that can reach the other nodes tells them of
    /// an approved call (new work) and a denied one (its waiters).
    fn decide(
        &self,
        tenant: Option<&str>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError>;

    /// `call_id`'s approval request and its decision, in `tenant`'s scope
    /// (`None`: any tenant's); `None` when there is no such call or it
    /// never waited for a decision.
    fn approval(&self, tenant: Option<&str>, call_id: &str)
        -> Result<Option<Approval>, StoreError>;

    /// The queue: up to `limit` calls waiting for a decision in `tenant`'s
    /// scope (`None`: every tenant's), oldest first, after call id `after`.
    fn waiting(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Waiting>, StoreError>;

    /// End up to `limit` requests whose time is over `denied` (source
    /// `expiry`), each by the decision's own fenced update; the calls ended.
    fn expire_approvals(&self, limit: usize) -> Result<Vec<Call>, StoreError>;

    /// Claim up to `limit` due notifications of the webhook outbox for one
    /// delivery attempt each, held from every other deliverer for `hold` by
    /// a conditional update (its row count decides), each with its call and
    /// request; one whose call is gone is dropped.
    fn take_notifications(
        &self,
        limit: usize,
        hold: std::time::Duration,
    ) -> Result<Vec<Notification>, StoreError>;

    /// What became of attempt `attempts` of notification `msg_id`: gone
    /// (delivered or given up), or due again later; fenced by the attempt.
    fn settle_notification(
        &self,
        msg_id: &str,
        attempts: i64,
        delivery: Delivery,
    ) -> Result<(), StoreError>;

    /// The owner stopped `lease`'s attempt because its cancel was asked:
    /// `cancelled`, fenced like a completion (still `running` under this
    /// attempt, its cancel recorded, and no effect row), audited with
    /// whether the tool had reached the outside (`sent`) and `how` it
    /// stopped; otherwise only a `stale_completion` row (`Stale`).
    fn stopped_then(&self, lease: &Lease, sent: bool, how: &str, then: Then<Completion>);

    /// Which of `running` (attempts this process runs) have their cancel
    /// asked: their tools must stop. One read.
    fn cancels_asked(&self, running: &[LeaseHeld]) -> Result<Vec<LeaseHeld>, StoreError>;

    /// Up to `limit` `pending` calls that may be claimed now (none whose
    /// automatic retry is scheduled for later), oldest first.
    fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError>;

    /// A call by id, whatever its tenant: for a caller that already holds
    /// the call (the wait loop), never for a tenant's lookup (`get_for`).
    fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError>;

    /// `tenant`'s call by id; another tenant's reads as absent, so its
    /// existence never shows.
    fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError>;

    /// The key's call within `tenant`, as last committed: the fast path of a
    /// same-key retry (`idem_key` and `fingerprint` never change once
    /// written, so a committed row is a safe answer without joining a write).
    fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError>;

    /// `tenant`'s call and its audit rows, oldest first, read in one
    /// snapshot; `None` when the tenant has no such call.
    fn audit_for(&self, tenant: &str, call_id: &str)
        -> Result<Option<Vec<AuditEvent>>, StoreError>;

    /// Purge up to `limit` terminal calls whose last update is older than
    /// the retention's TTL (nothing when keys are kept forever), with their
    /// audit and business-key rows; their effects stay as the ledger. A call
    /// a same-key retry reset meanwhile is left alone: the delete re-checks
    /// the row. Returns what was purged.
    fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError>;

    /// What `/healthz` reports: whether the database answers a fresh read
    /// now, and whether this process can still write (a backend with a
    /// writer thread says so when it is stuck with work queued).
    fn health(&self) -> Health;

    /// Why this process can never write again, if it cannot (on SQLite, a
    /// failed sync of the WAL). A backend that replaces a failed connection
    /// has no such state.
    fn write_failure(&self) -> Option<StoreError> {
        None
    }

    /// Calls by status and the oldest pending call, in one read (a scrape),
    /// from the count tables (`counts`).
    fn backlog(&self) -> Result<Backlog, StoreError>;

    /// Every call's counts (`Scope::All`), or one tenant's, read in one
    /// snapshot so the statuses never outnumber the calls; from the count
    /// tables, exactly what `GROUP BY status, attempt` over `calls` and
    /// `count(*)` over `effects` (for a tenant: those of its calls still
    /// kept) would answer.
    fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError>;

    /// `scope`'s count rows, its effects and its oldest pending call, in
    /// one snapshot, without reading `calls` but for one index seek per
    /// (tenant, tool) with pending calls. The count tables change in the
    /// same transaction as the rows they count, so they are exact.
    fn counts(&self, scope: Scope<'_>) -> Result<Counts, StoreError>;

    /// A page of `query` (`ListQuery::page`), newest first: the counts the
    /// plan is made from (`ListQuery::plan`) and the rows read in one
    /// snapshot, each by an index, every row checked against the whole
    /// query (`ListQuery::admits`). Never a row outside the query's tenant.
    fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError>;

    /// The instances heard from last, at most `NODES_LISTED`, most recent
    /// first, each judged alive by recovery's rule (`instance::is_alive`)
    /// on the clock its heartbeat is written by, with its running calls.
    fn nodes(&self) -> Result<Vec<Node>, StoreError>;

    /// Every business key's calls and effects, grouped (the chapter's
    /// reconciliation by business key rather than by request), largest
    /// number of calls first.
    fn intent_ledger(&self, limit: usize) -> Result<Vec<IntentLedger>, StoreError>;

    /// `verify` on this database (`GET /v1/verify`): read-only, one
    /// snapshot, on a connection of its own (never one that calls' reads or
    /// writes wait for), stopped at `deadline` (`VerifyError::TimedOut`, never
    /// a check cut short and read as violated). What it read is handed back
    /// only once it is durable, like any read.
    fn verify_until(&self, effect_tools: &[&str], deadline: Instant)
        -> Result<Report, VerifyError>;
}
