//! The store's vocabulary: the types its public API takes and returns. They
//! are plain data — no SQLite type appears here, so a second backend can
//! produce the same values — and they decide nothing: every transition is
//! decided by the store's conditional statements.

use super::error::StoreError;
use super::gate::Gate;
use super::ids::new_effect_id;
use crate::status::Status;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// One row of `calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub call_id: String,
    /// Whose key this is: keys are unique per tenant, and no tenant sees
    /// another's calls.
    pub tenant: String,
    pub idem_key: String,
    pub fingerprint: String,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
    pub tool: String,
    pub args_json: String,
    pub status: Status,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// How many times a worker has claimed this call.
    pub attempt: i64,
    /// Wall-clock seconds until which the current `owner` may execute.
    pub lease_until: Option<f64>,
    /// `pid:thread` of the worker holding the lease.
    pub owner: Option<String>,
    /// The downstream idempotency key every attempt sends: `eff_` + the
    /// call id's 16 hex + `_` + 32 random hex, stored when the call is
    /// created (`ids::new_effect_id`); a call created before that stores
    /// none and keeps `eff_` + its 16 hex (`ids::effect_id_for`).
    pub effect_id: String,
    pub created_at: f64,
    pub updated_at: f64,
    /// When a terminal call may be purged (`updated_at` + `--key-ttl`);
    /// `None` while in flight or when keys are kept forever. Computed by the
    /// store from its `Retention`, never stored.
    pub expires_at: Option<f64>,
    /// For a `pending` call whose last attempt failed retryably: wall-clock
    /// seconds before which no claim takes it. `None`: at once.
    pub next_attempt_at: Option<f64>,
    /// When its tenant asked to cancel it (`POST .../cancel`); `None` if never.
    /// A `running` call with one set is being stopped: no claim takes it
    /// over, and whatever ends it short of a success makes it `cancelled`.
    pub cancel_requested_at: Option<f64>,
    /// The last progress its tool reported, as the node running it stored
    /// it with the lease (`progress_json`); any attempt's, so read it with
    /// `running_progress`.
    pub progress: Option<CallProgress>,
}

/// A running call's last progress report, stored with the call when its
/// running node extends the lease (at most once per extension, so at most
/// every third of the lease), so that every node shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallProgress {
    /// The attempt that reported it: shown only while that attempt runs.
    pub attempt: i64,
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
    /// Wall-clock seconds when the tool reported it.
    pub at: f64,
}

impl CallProgress {
    /// As stored in `progress_json` (and as the API shows it, less `attempt`).
    pub fn to_json(&self) -> Value {
        json!({
            "attempt": self.attempt,
            "progress": self.progress,
            "total": self.total,
            "message": self.message,
            "at": self.at,
        })
    }

    /// From `progress_json`; `None` for anything that is not a report.
    pub fn from_json(text: &str) -> Option<CallProgress> {
        let value: Value = serde_json::from_str(text).ok()?;
        Some(CallProgress {
            attempt: value.get("attempt")?.as_i64()?,
            progress: value.get("progress")?.as_f64()?,
            total: value.get("total").and_then(Value::as_f64),
            message: value
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string),
            at: value.get("at").and_then(Value::as_f64).unwrap_or(0.0),
        })
    }
}

impl Call {
    /// The stored progress of the attempt running now, if it reported any.
    pub fn running_progress(&self) -> Option<&CallProgress> {
        self.progress
            .as_ref()
            .filter(|p| self.status == Status::Running && p.attempt == self.attempt)
    }

    /// A failure whose error says the client may retry it with the same key.
    pub fn is_retryable_failure(&self) -> bool {
        self.status == Status::Failed
            && self
                .error
                .as_ref()
                .and_then(|e| e.get("retryable"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
    }

    /// Whether the call has ended and its client cannot run it again:
    /// `succeeded`, `cancelled`, `denied`, or a failure its client may not
    /// retry (an operator may still re-run a failed or cancelled one:
    /// `is_final`).
    pub fn is_settled(&self) -> bool {
        matches!(
            self.status,
            Status::Succeeded | Status::Cancelled | Status::Denied
        ) || (self.status == Status::Failed && !self.is_retryable_failure())
    }

    /// Whether the call can never change again, by anyone: `succeeded` (its
    /// effect happened; it is never re-run) or `denied` (a person refused
    /// it). A failed or cancelled call may be re-run by an operator
    /// (`store::rerun`).
    pub fn is_final(&self) -> bool {
        matches!(self.status, Status::Succeeded | Status::Denied)
    }

    /// Its error's code (`error.code`): its last failure's, or `cancelled`.
    pub fn error_code(&self) -> Option<&str> {
        self.error.as_ref()?.get("code")?.as_str()
    }

    /// The row `insert_call` writes, built here so it need not be read back:
    /// `pending`, or `awaiting_approval` when it carries a gate.
    pub(super) fn pending(call_id: String, new: NewCall, now: f64) -> Call {
        let status = match new.gate {
            Some(_) => Status::AwaitingApproval,
            None => Status::Pending,
        };
        Call {
            effect_id: new_effect_id(&call_id),
            call_id,
            tenant: new.tenant,
            idem_key: new.idem_key,
            fingerprint: new.fingerprint,
            client_id: new.client_id,
            seq: new.seq,
            tool: new.tool,
            args_json: new.args_json,
            status,
            result: None,
            error: None,
            attempt: 0,
            lease_until: None,
            owner: None,
            created_at: now,
            updated_at: now,
            expires_at: None,
            next_attempt_at: None,
            cancel_requested_at: None,
            progress: None,
        }
    }

    /// The same row, created already `running`: its first attempt held by
    /// `owner` until `lease_until` (`create_claimed`).
    pub(super) fn claimed_at_creation(mut self, owner: &str, lease_until: f64) -> Call {
        self.status = Status::Running;
        self.attempt = 1;
        self.lease_until = Some(lease_until);
        self.owner = Some(owner.to_string());
        self
    }

    /// The lease a `running` call's row describes: what its creator (the
    /// only one who can know it holds it) runs under.
    pub(super) fn lease(&self) -> Option<Lease> {
        if self.status != Status::Running {
            return None;
        }
        Some(Lease {
            call_id: self.call_id.clone(),
            attempt: self.attempt,
            tool: self.tool.clone(),
            args_json: self.args_json.clone(),
            effect_id: self.effect_id.clone(),
            lease_until: self.lease_until?,
        })
    }

    /// The call's URL, for `Location` and `query_url`.
    pub fn url(&self) -> String {
        format!("/v1/tool-calls/{}", self.call_id)
    }
}

/// A request to create a call, already validated and fingerprinted.
#[derive(Debug, Clone)]
pub struct NewCall {
    /// The authenticated tenant: the key's scope.
    pub tenant: String,
    pub idem_key: String,
    pub fingerprint: String,
    pub tool: String,
    /// Canonical JSON of the args as sent (chaos hooks included).
    pub args_json: String,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
    /// Its tool's approval policy held for its args: the call is created
    /// `awaiting_approval`, with its request (`store::approval`).
    pub gate: Option<Gate>,
}

/// The local record of a side effect, written with its call's `succeeded`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewEffect {
    /// The amount, for `charge`.
    pub amount: Option<i64>,
    /// What the downstream said (its status and a body excerpt, or a
    /// command's exit code), as JSON.
    pub detail: Option<Value>,
}

/// What `create_or_get` found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new `pending` call: submit it.
    New(Call),
    /// The key's call, untouched: never execute it again.
    Existing(Call),
    /// A retryable failure reset to `pending`: submit it.
    RetryReset(Call),
    /// The key belongs to a request with another fingerprint.
    Conflict(Call),
}

impl Created {
    /// The same outcome with `f` applied to its call (the store stamps
    /// `expires_at` this way).
    pub(super) fn map(self, f: impl FnOnce(Call) -> Call) -> Created {
        match self {
            Created::New(c) => Created::New(f(c)),
            Created::Existing(c) => Created::Existing(f(c)),
            Created::RetryReset(c) => Created::RetryReset(f(c)),
            Created::Conflict(c) => Created::Conflict(f(c)),
        }
    }
}

/// What `create_claimed` found or did: `lease` is `Some` exactly when
/// `created` is a new call, which is then `running` under it, attempt 1 —
/// the caller must run it (or let the lease expire). Every other outcome is
/// what `create_or_get` would have answered, with no lease.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedClaimed {
    pub created: Created,
    pub lease: Option<Lease>,
}

/// How long a retryable failure waits before its next attempt
/// (`CallStore::retry_later_then`), and, when the tool's cap shortened a
/// downstream's `Retry-After`, what the downstream had asked for: the
/// audit's `retry_scheduled` detail says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDelay {
    pub delay: Duration,
    /// The downstream's `Retry-After`, when it was longer than the tool
    /// allows (`retry_after_max_ms`); `delay` is then that cap.
    pub capped_from: Option<Duration>,
}

/// A delay no `Retry-After` shortened.
impl From<Duration> for RetryDelay {
    fn from(delay: Duration) -> RetryDelay {
        RetryDelay {
            delay,
            capped_from: None,
        }
    }
}

/// What a stopping process had done to the tool of a lease it gives back
/// (`CallStore::release`): the audit's `released` detail says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolAtRelease {
    /// No tool of the lease was running: it had not started, or had
    /// returned.
    Idle,
    /// Its tool was stopped first and has ended; `sent`: it had reached the
    /// outside (the process started, the request went out); `how` it ended.
    Stopped { sent: bool, how: String },
    /// Its tool was asked to stop and had not ended when the wait for it
    /// ran out (a process stuck in the kernel, a connect in progress).
    StillStopping { sent: bool },
}

/// The right to execute one attempt of a call, held until `lease_until`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub call_id: String,
    /// The attempt number this lease fences: completions apply only while the
    /// row still has this attempt and is `running`.
    pub attempt: i64,
    pub tool: String,
    pub args_json: String,
    pub effect_id: String,
    pub lease_until: f64,
}

/// Which attempt of which call a lease is on: all recovery needs to know of
/// the leases this process's workers hold (`CallStore::recover`), without
/// copying their arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHeld {
    pub call_id: String,
    pub attempt: i64,
}

impl From<&Lease> for LeaseHeld {
    fn from(lease: &Lease) -> LeaseHeld {
        LeaseHeld {
            call_id: lease.call_id.clone(),
            attempt: lease.attempt,
        }
    }
}

/// A `pending` call that may be claimed now: its tool decides which
/// concurrency cap it waits under before a worker takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCall {
    pub call_id: String,
    pub tool: String,
}

/// Whether a fenced completion took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Applied,
    /// The lease was lost (another attempt took over, or the call is terminal):
    /// the completion was discarded and audited as `stale_completion`.
    Stale,
    /// The call's cancel had been asked: this completion, short of a
    /// success, ended it `cancelled` instead (see `store::cancel`).
    Cancelled,
}

/// What to do with a write's outcome once it is durable (a completion's,
/// above all). Called exactly once, on whichever thread learns the outcome —
/// on SQLite the syncer's, after the fsync that covers the commit; on
/// PostgreSQL the caller's own — so it must be quick.
pub type Then<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

/// How long terminal calls are kept: `key_ttl` after their last update, or
/// forever (`None`). The store purges by it and stamps `expires_at` with it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retention {
    pub key_ttl: Option<std::time::Duration>,
}

impl Retention {
    /// When `call` may be purged: only terminal calls expire.
    pub fn expires_at(&self, call: &Call) -> Option<f64> {
        let ttl = self.key_ttl?;
        call.status
            .is_terminal()
            .then_some(call.updated_at + ttl.as_secs_f64())
    }

    /// `call` with its `expires_at` filled in.
    pub fn stamp(&self, mut call: Call) -> Call {
        call.expires_at = self.expires_at(&call);
        call
    }
}

/// A call the retention policy removed, so caches can forget its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    pub call_id: String,
    pub tenant: String,
    pub idem_key: String,
}

/// One row of a call's audit timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// Unix time in seconds.
    pub at: f64,
    pub event: String,
    /// The call's attempt when it happened; `None` in rows written before
    /// the column existed.
    pub attempt: Option<i64>,
    pub detail: Option<String>,
}

impl AuditEvent {
    pub fn to_json(&self) -> Value {
        json!({"at": self.at, "event": self.event, "attempt": self.attempt, "detail": self.detail})
    }
}

/// Whose calls `/stats` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every call in the file.
    All,
    /// One tenant's calls (and the effects of those still kept).
    Tenant(&'a str),
}

impl<'a> Scope<'a> {
    /// One tenant's (`Some`), or every tenant's (`None`): how a list query,
    /// the overview and a read thread carry a scope.
    pub fn of(tenant: Option<&'a str>) -> Scope<'a> {
        tenant.map_or(Scope::All, Scope::Tenant)
    }

    /// The tenant, or `None` for every tenant: `of`'s inverse.
    pub fn tenant(self) -> Option<&'a str> {
        match self {
            Scope::Tenant(tenant) => Some(tenant),
            Scope::All => None,
        }
    }
}

/// What the database says about the backlog, for a metrics scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Backlog {
    pub calls_by_status: Vec<(String, i64)>,
    /// `created_at` of the oldest `pending` call.
    pub oldest_pending_created_at: Option<f64>,
    /// When the oldest open approval request was made.
    pub oldest_awaiting_since: Option<f64>,
}

/// What `/healthz` needs from the store: a fresh read, and the writer's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// `Err` with what went wrong when a new connection could not read the file.
    pub database: Result<(), String>,
    /// `Err` when the writer has had work queued for too long without finishing a batch.
    pub writer: Result<(), String>,
}

/// What `/stats` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub calls: i64,
    pub effects: i64,
    pub by_status: Vec<(String, i64)>,
    pub attempts: Vec<(i64, i64)>,
    /// This process's writer since it started.
    pub writer: WriterStats,
}

/// Calls in all, by status, and by attempt: the part of `Stats` both
/// backends count alike.
#[derive(Debug, Default)]
pub(in crate::store) struct CallCounts {
    pub(in crate::store) calls: i64,
    pub(in crate::store) by_status: Vec<(String, i64)>,
    pub(in crate::store) attempts: Vec<(i64, i64)>,
}

impl CallCounts {
    /// `Stats` with these counts, `effects` and the writer's counters.
    pub(in crate::store) fn into_stats(self, effects: i64, writer: WriterStats) -> Stats {
        Stats {
            calls: self.calls,
            effects,
            by_status: self.by_status,
            attempts: self.attempts,
            writer,
        }
    }
}

/// Summed from `(status, attempt, count)` rows, in any order and grouped
/// by those two or more finely (by lease too, say); statuses and attempts
/// come out sorted.
impl FromIterator<(String, i64, i64)> for CallCounts {
    fn from_iter<I: IntoIterator<Item = (String, i64, i64)>>(rows: I) -> CallCounts {
        let (mut calls, mut by_status, mut attempts) = (0, BTreeMap::new(), BTreeMap::new());
        for (status, attempt, n) in rows {
            calls += n;
            *by_status.entry(status).or_insert(0) += n;
            *attempts.entry(attempt).or_insert(0) += n;
        }
        CallCounts {
            calls,
            by_status: by_status.into_iter().collect(),
            attempts: attempts.into_iter().collect(),
        }
    }
}

/// How well this process's writes are grouped, and where the writer's time
/// goes: running operations, or committing them (the fsync). Cumulative since
/// the store opened; the bench reports the difference across a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed (or rolled back).
    pub batches: u64,
    /// Operations those transactions carried.
    pub ops: u64,
    /// Microseconds spent running operations inside the transactions.
    pub run_us: u64,
    /// Microseconds spent in `COMMIT`: writing the WAL and syncing it, plus the
    /// checkpoint SQLite runs inside it about every 1,000 WAL pages.
    pub commit_us: u64,
}

impl WriterStats {
    pub fn to_json(self) -> Value {
        json!({"batches": self.batches, "ops": self.ops, "run_us": self.run_us, "commit_us": self.commit_us})
    }

    /// Read back what `to_json` wrote (a missing field counts as 0).
    pub fn from_json(v: &Value) -> WriterStats {
        let field = |name: &str| v[name].as_u64().unwrap_or(0);
        WriterStats {
            batches: field("batches"),
            ops: field("ops"),
            run_us: field("run_us"),
            commit_us: field("commit_us"),
        }
    }

    /// The work done since `earlier`, a snapshot of the same writer.
    pub fn since(self, earlier: WriterStats) -> WriterStats {
        WriterStats {
            batches: self.batches.saturating_sub(earlier.batches),
            ops: self.ops.saturating_sub(earlier.ops),
            run_us: self.run_us.saturating_sub(earlier.run_us),
            commit_us: self.commit_us.saturating_sub(earlier.commit_us),
        }
    }

    /// How many operations each commit carried.
    pub fn ops_per_batch(self) -> f64 {
        self.ops as f64 / self.batches.max(1) as f64
    }

    pub fn run_us_per_op(self) -> f64 {
        self.run_us as f64 / self.ops.max(1) as f64
    }

    pub fn commit_ms_per_batch(self) -> f64 {
        self.commit_us as f64 / 1000.0 / self.batches.max(1) as f64
    }
}

impl Stats {
    pub fn to_json(&self) -> Value {
        let by_status: Map<String, Value> = self
            .by_status
            .iter()
            .map(|(s, n)| (s.clone(), json!(n)))
            .collect();
        let attempts: Map<String, Value> = self
            .attempts
            .iter()
            .map(|(a, n)| (a.to_string(), json!(n)))
            .collect();
        json!({
            "calls": self.calls,
            "effects": self.effects,
            "by_status": by_status,
            "attempts": attempts,
            "writer": self.writer.to_json(),
        })
    }
}
