//! The metric families this service exports, by name, as handles the rest of
//! the code calls `.inc()`, `.set()` or `.observe()` on.
//!
//! Names follow Prometheus conventions: the `idempotent_tool_` prefix, base
//! units (`_seconds`), `_total` on counters. Every series with a fixed label
//! set exists from start-up (at zero), so a rate over a fresh process is never
//! "no data". Label values come only from this file's enums and from tool
//! names, which the operator configures: never from a request.

use super::registry::{Registry, CONTENT_TYPE};
use super::series::{Counter, Family, Gauge, Histogram};
use crate::lock::lock;
use crate::status::Status;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const HTTP_REQUESTS: &str = "idempotent_tool_http_requests_total";
pub const HTTP_REQUEST_DURATION: &str = "idempotent_tool_http_request_duration_seconds";
pub const CALLS_CREATED: &str = "idempotent_tool_calls_created_total";
pub const REPLAYS: &str = "idempotent_tool_replays_total";
pub const CONFLICTS: &str = "idempotent_tool_conflicts_total";
pub const RETRY_RESETS: &str = "idempotent_tool_retry_resets_total";
pub const CLAIMS: &str = "idempotent_tool_claims_total";
pub const RECOVERIES: &str = "idempotent_tool_recoveries_total";
pub const STALE_COMPLETIONS: &str = "idempotent_tool_stale_completions_total";
pub const COMPLETIONS_RETRIED: &str = "idempotent_tool_completions_retried_total";
pub const PURGES: &str = "idempotent_tool_calls_purged_total";
pub const EFFECTS_WRITTEN: &str = "idempotent_tool_effects_written_total";
pub const TOOL_RUNS: &str = "idempotent_tool_tool_runs_total";
pub const TOOL_RUN_DURATION: &str = "idempotent_tool_tool_run_duration_seconds";
pub const RETRIES_SCHEDULED: &str = "idempotent_tool_retries_scheduled_total";
pub const CALLS: &str = "idempotent_tool_calls";
pub const OLDEST_PENDING_AGE: &str = "idempotent_tool_oldest_pending_age_seconds";
pub const DATABASE_PROBE_ERRORS: &str = "idempotent_tool_metrics_database_errors_total";
pub const WRITER_BATCHES: &str = "idempotent_tool_writer_batches_total";
pub const WRITER_BATCH_OPERATIONS: &str = "idempotent_tool_writer_batch_operations";
pub const WRITER_COMMIT_DURATION: &str = "idempotent_tool_writer_commit_duration_seconds";
pub const OPEN_CONNECTIONS: &str = "idempotent_tool_open_connections";
pub const BUSY_WORKERS: &str = "idempotent_tool_busy_workers";
pub const QUEUED_CALLS: &str = "idempotent_tool_queued_calls";
pub const SUBMISSIONS: &str = "idempotent_tool_submissions_total";
pub const OVERLOADED: &str = "idempotent_tool_overloaded_total";
pub const ACCESS_LOG_DROPPED: &str = "idempotent_tool_access_log_dropped_lines_total";
pub const CANCELS: &str = "idempotent_tool_cancels_total";
pub const LIMIT_WAIT: &str = "idempotent_tool_limit_wait_seconds";
pub const LIMIT_DEFERRALS: &str = "idempotent_tool_limit_deferrals_total";

/// A request's wait may last 30 s, so the buckets reach past it.
const REQUEST_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const TOOL_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// A commit is an fsync: tens of microseconds on a fast disk, many ms on a slow one.
const COMMIT_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
const BATCH_OPERATIONS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The routes the router knows, as `route` label values (path templates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    PostToolCall,
    GetToolCall,
    GetToolCallByKey,
    GetAudit,
    ListTools,
    Stats,
    Healthz,
    Metrics,
    OpenApi,
    /// `POST /mcp`: MCP over Streamable HTTP.
    Mcp,
    Nodes,
    Overview,
    CancelToolCall,
    /// `POST /v1/tool-calls/{call_id}/approve`.
    ApproveToolCall,
    /// `POST /v1/tool-calls/{call_id}/deny`.
    DenyToolCall,
    /// `GET /v1/tool-calls/{call_id}/approval`.
    GetApproval,
    /// `GET /v1/approvals`: the approval queue.
    Approvals,
    RerunToolCall,
    /// `POST /v1/bulk-actions`.
    PostBulkAction,
    /// `GET /v1/bulk-actions/{job_id}`.
    GetBulkAction,
    /// `POST /v1/tools/{name}/pause` and `/resume`.
    PauseTool,
    ResumeTool,
    /// `GET /v1/verify`: the promise check.
    Verify,
    /// `/ui` and everything under it: the console's pages and files.
    Console,
    /// Any path the router does not know (a `404`).
    Other,
}

impl Route {
    pub const ALL: [Route; 25] = [
        Route::PostToolCall,
        Route::GetToolCall,
        Route::GetToolCallByKey,
        Route::GetAudit,
        Route::ListTools,
        Route::Stats,
        Route::Healthz,
        Route::Metrics,
        Route::OpenApi,
        Route::Mcp,
        Route::Nodes,
        Route::Overview,
        Route::CancelToolCall,
        Route::ApproveToolCall,
        Route::DenyToolCall,
        Route::GetApproval,
        Route::Approvals,
        Route::RerunToolCall,
        Route::PostBulkAction,
        Route::GetBulkAction,
        Route::PauseTool,
        Route::ResumeTool,
        Route::Verify,
        Route::Console,
        Route::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Route::PostToolCall => "/v1/tool-calls",
            Route::GetToolCall => "/v1/tool-calls/{call_id}",
            Route::GetToolCallByKey => "/v1/tool-calls/by-key/{key}",
            Route::GetAudit => "/v1/tool-calls/{call_id}/audit",
            Route::ListTools => "/v1/tools",
            Route::Stats => "/stats",
            Route::Healthz => "/healthz",
            Route::Metrics => "/metrics",
            Route::OpenApi => "/openapi.yaml",
            Route::Mcp => "/mcp",
            Route::Nodes => "/v1/nodes",
            Route::Overview => "/v1/overview",
            Route::Verify => "/v1/verify",
            Route::Console => "/ui",
            Route::Other => "other",
            Route::CancelToolCall => "/v1/tool-calls/{call_id}/cancel",
            Route::ApproveToolCall => "/v1/tool-calls/{call_id}/approve",
            Route::DenyToolCall => "/v1/tool-calls/{call_id}/deny",
            Route::GetApproval => "/v1/tool-calls/{call_id}/approval",
            Route::Approvals => "/v1/approvals",
            Route::RerunToolCall => "/v1/tool-calls/{call_id}/rerun",
            Route::PostBulkAction => "/v1/bulk-actions",
            Route::GetBulkAction => "/v1/bulk-actions/{job_id}",
            Route::PauseTool => "/v1/tools/{name}/pause",
            Route::ResumeTool => "/v1/tools/{name}/resume",
        }
    }
}

/// `1xx` to `5xx`; anything outside 100–599 counts as `5xx`, which it would be
/// a bug to send.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn status_class_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100 - 1),
        _ => 4,
    }
}

/// Which door a call came in by: `POST /v1/tool-calls` or MCP's `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Mcp,
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Mcp => "mcp",
        }
    }
}

/// What a submitted call turned out to be, for `SUBMISSIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitOutcome {
    Created,
    Replayed,
    Conflict,
    DuplicateIntent,
}

impl SubmitOutcome {
    const ALL: [SubmitOutcome; 4] = [
        SubmitOutcome::Created,
        SubmitOutcome::Replayed,
        SubmitOutcome::Conflict,
        SubmitOutcome::DuplicateIntent,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SubmitOutcome::Created => "created",
            SubmitOutcome::Replayed => "replayed",
            SubmitOutcome::Conflict => "conflict",
            SubmitOutcome::DuplicateIntent => "duplicate_intent",
        }
    }
}

/// What a cancel (`POST /v1/tool-calls/{call_id}/cancel`) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// `200`: the call is `cancelled`.
    Cancelled,
    /// `202`: still running, its tool asked to stop.
    Stopping,
    /// `409 call_settled`: it had succeeded or failed.
    Settled,
    /// `404`: no such call for the tenant.
    NotFound,
}

impl CancelOutcome {
    const ALL: [CancelOutcome; 4] = [
        CancelOutcome::Cancelled,
        CancelOutcome::Stopping,
        CancelOutcome::Settled,
        CancelOutcome::NotFound,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CancelOutcome::Cancelled => "cancelled",
            CancelOutcome::Stopping => "stopping",
            CancelOutcome::Settled => "settled",
            CancelOutcome::NotFound => "not_found",
        }
    }
}

/// How one run of a tool ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    Succeeded,
    /// Failed, and may be tried again (by a retry or a same-key POST).
    RetryableFailure,
    PermanentFailure,
    /// Halted because its call was cancelled.
    Stopped,
}

impl ToolOutcome {
    pub fn label(self) -> &'static str {
        match self {
            ToolOutcome::Succeeded => "succeeded",
            ToolOutcome::RetryableFailure => "retryable_failure",
            ToolOutcome::PermanentFailure => "permanent_failure",
            ToolOutcome::Stopped => "stopped",
        }
    }
}

/// The limit a tool's calls waited on: its `max_concurrency`, or its `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitedOn {
    Concurrency,
    Rate,
}

impl WaitedOn {
    pub fn label(self) -> &'static str {
        match self {
            WaitedOn::Concurrency => "concurrency",
            WaitedOn::Rate => "rate",
        }
    }
}

/// What the database says at a scrape, read by a probe the store provides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DatabaseSnapshot {
    /// Calls per status (a status absent here counts as zero).
    pub calls_by_status: Vec<(String, i64)>,
    /// Age of the oldest `pending` call; `None` when there is none.
    pub oldest_pending_age: Option<Duration>,
    /// Age of the oldest open approval request; `None` when none is open.
    pub oldest_approval_wait: Option<Duration>,
}

/// Why a probe could not read the database (a store error, usually).
pub type ProbeError = Box<dyn std::error::Error + Send + Sync>;

type Probe = Box<dyn Fn() -> Result<DatabaseSnapshot, ProbeError> + Send + Sync>;

/// Every metric of the service. One per process, shared behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    /// `[route][status class]`, indexed without a lookup on the request path.
    requests: Vec<[Arc<Counter>; 5]>,
    request_duration: Vec<Arc<Histogram>>,
    pub calls_created: Arc<Counter>,
    /// A POST answered with an existing call (`Idempotent-Replayed: true`).
    pub replays: Arc<Counter>,
    pub conflicts: Arc<Counter>,
    pub retry_resets: Arc<Counter>,
    pub claims: Arc<Counter>,
    pub recoveries: Arc<Counter>,
    pub stale_completions: Arc<Counter>,
    pub completions_retried: Arc<Counter>,
    pub purges: Arc<Counter>,
    pub effects_written: Arc<Counter>,
    pub retries_scheduled: Arc<Counter>,
    tool_runs: Arc<Family<Counter>>,
    submissions: Arc<Family<Counter>>,
    cancels: Arc<Family<Counter>>,
    tool_run_duration: Arc<Family<Histogram>>,
    limit_wait: Arc<Family<Histogram>>,
    limit_deferrals: Arc<Family<Counter>>,
    pub writer_batches: Arc<Counter>,
    pub writer_batch_operations: Arc<Histogram>,
    pub writer_commit_duration: Arc<Histogram>,
    pub open_connections: Arc<Gauge>,
    pub busy_workers: Arc<Gauge>,
    pub queued_calls: Arc<Gauge>,
    /// POSTs refused `503 overloaded` (`--max-pending`).
    pub overloaded: Arc<Counter>,
    /// Access-log lines dropped because the log writer fell behind.
    pub access_log_dropped: Arc<Counter>,
    database_errors: Arc<Counter>,
    probe: Mutex<Option<Probe>>,
    /// What the probe read for the scrape being rendered.
    snapshot: Arc<Mutex<Option<DatabaseSnapshot>>>,
    /// The operator's families: paused tools, re-runs, bulk jobs.
    pub operator: super::operator::OperatorMetrics,
    /// Approval requests, decisions, the oldest wait, webhook deliveries.
    pub approvals: super::ApprovalMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let requests_family = r.counter_family(
            HTTP_REQUESTS,
            "HTTP requests answered, by route and status class.",
            &["route", "status_class"],
        );
        let duration_family = r.histogram_family(
            HTTP_REQUEST_DURATION,
            "Time from a request's head arriving to its response written, by route.",
            &["route"],
            REQUEST_SECONDS,
        );
        let requests = Route::ALL
            .iter()
            .map(|route| STATUS_CLASSES.map(|class| requests_family.with(&[route.label(), class])))
            .collect();
        let request_duration = Route::ALL
            .iter()
            .map(|route| duration_family.with(&[route.label()]))
            .collect();
        let snapshot = Arc::new(Mutex::new(None));
        Metrics {
            calls_created: r.counter(
                CALLS_CREATED,
                "Calls created (a new key, or a key whose call was purged).",
            ),
            replays: r.counter(REPLAYS, "POSTs answered with an existing call."),
            conflicts: r.counter(
                CONFLICTS,
                "POSTs refused: same key, different fingerprint (409).",
            ),
            retry_resets: r.counter(
                RETRY_RESETS,
                "Retryable failed calls reset to pending by a same-key POST.",
            ),
            claims: r.counter(CLAIMS, "Leases taken by workers (attempts started)."),
            recoveries: r.counter(
                RECOVERIES,
                "Running calls whose lease expired, put back to pending.",
            ),
            stale_completions: r.counter(
                STALE_COMPLETIONS,
                "Completions discarded because their lease was lost.",
            ),
            completions_retried: r.counter(
                COMPLETIONS_RETRIED,
                "Completions the store could not commit (locked, full, failing), handed to it again.",
            ),
            purges: r.counter(PURGES, "Terminal calls purged after the key TTL."),
            effects_written: r.counter(EFFECTS_WRITTEN, "Rows written to the effects ledger."),
            tool_runs: r.counter_family(
                TOOL_RUNS,
                "Tool runs, by tool and outcome.",
                &["tool", "outcome"],
            ),
            submissions: {
                let family = r.counter_family(
                    SUBMISSIONS,
                    "Calls submitted, by transport (http, mcp) and what they turned out to be.",
                    &["transport", "outcome"],
                );
                for transport in [Transport::Http, Transport::Mcp] {
                    for outcome in SubmitOutcome::ALL {
                        family.with(&[transport.label(), outcome.label()]);
                    }
                }
                family
            },
            cancels: {
                let family = r.counter_family(
                    CANCELS,
                    "Cancel requests, by what they answered (cancelled, stopping, settled, not_found).",
                    &["outcome"],
                );
                for outcome in CancelOutcome::ALL {
                    family.with(&[outcome.label()]);
                }
                family
            },
            tool_run_duration: r.histogram_family(
                TOOL_RUN_DURATION,
                "Time a tool ran, outside any transaction, by tool.",
                &["tool"],
                TOOL_SECONDS,
            ),
            limit_wait: r.histogram_family(
                LIMIT_WAIT,
                "Time a call of a limited tool waited, from due to claimed, by tool and its tighter limit.",
                &["tool", "limit"],
                TOOL_SECONDS,
            ),
            limit_deferrals: r.counter_family(
                LIMIT_DEFERRALS,
                "Claims by this process that left due calls of a tool pending because a limit had no room.",
                &["tool", "limit"],
            ),
            retries_scheduled: r.counter(
                RETRIES_SCHEDULED,
                "Automatic retries scheduled after a retryable failure.",
            ),
            writer_batches: r.counter(
                WRITER_BATCHES,
                "Write transactions the writer thread committed or rolled back.",
            ),
            writer_batch_operations: r.histogram(
                WRITER_BATCH_OPERATIONS,
                "Operations carried by one write transaction.",
                BATCH_OPERATIONS,
            ),
            writer_commit_duration: r.histogram(
                WRITER_COMMIT_DURATION,
                "Time spent in COMMIT (writing and syncing the WAL).",
                COMMIT_SECONDS,
            ),
            open_connections: r.gauge(OPEN_CONNECTIONS, "Open client connections."),
            busy_workers: r.gauge(BUSY_WORKERS, "Workers running a call now."),
            queued_calls: r.gauge(QUEUED_CALLS, "Calls queued in this process for a worker."),
            overloaded: r.counter(
                OVERLOADED,
                "POSTs refused 503 overloaded: more calls queued for a worker than --max-pending.",
            ),
            access_log_dropped: r.counter(
                ACCESS_LOG_DROPPED,
                "Access-log lines dropped because the log writer fell behind.",
            ),
            database_errors: r.counter(
                DATABASE_PROBE_ERRORS,
                "Scrapes whose database read failed (the call gauges are then absent).",
            ),
            requests,
            request_duration,
            probe: Mutex::new(None),
            approvals: super::ApprovalMetrics::register(&r, snapshot.clone()),
            snapshot: Self::register_database_gauges(&r, snapshot.clone()),
            operator: super::operator::OperatorMetrics::new(&r),
            registry: r,
        }
    }

    /// The two gauges read from the database: filled from the snapshot the
    /// probe took for this scrape, so one scrape costs one read.
    fn register_database_gauges(
        r: &Registry,
        snapshot: Arc<Mutex<Option<DatabaseSnapshot>>>,
    ) -> Arc<Mutex<Option<DatabaseSnapshot>>> {
        let by_status = snapshot.clone();
        r.gauge_fn(
            CALLS,
            "Calls in the database, by status.",
            &["status"],
            move || {
                let Some(snapshot) = lock(&by_status).clone() else {
                    return Vec::new();
                };
                let count = |status: &str| {
                    let found = snapshot.calls_by_status.iter().find(|(s, _)| s == status);
                    found.map_or(0, |(_, n)| *n)
                };
                // Every status has a series, even at zero.
                let known = Status::words().map(|s| (vec![s.to_string()], count(s) as f64));
                let others = snapshot
                    .calls_by_status
                    .iter()
                    .filter(|(s, _)| Status::parse(s).is_err())
                    .map(|(s, n)| (vec![s.clone()], *n as f64));
                known.into_iter().chain(others).collect()
            },
        );
        let oldest = snapshot.clone();
        r.gauge_fn(
            OLDEST_PENDING_AGE,
            "Age of the oldest pending call; 0 when none is pending.",
            &[],
            move || match &*lock(&oldest) {
                Some(s) => vec![(
                    vec![],
                    s.oldest_pending_age.map_or(0.0, |a| a.as_secs_f64()),
                )],
                None => Vec::new(),
            },
        );
        snapshot
    }

    /// How `/metrics` reads the database at each scrape; it must be cheap
    /// (counts from an index, one `min()`), since it runs on every scrape.
    pub fn set_database_probe(
        &self,
        probe: impl Fn() -> Result<DatabaseSnapshot, ProbeError> + Send + Sync + 'static,
    ) {
        *lock(&self.probe) = Some(Box::new(probe));
    }

    /// One answered request.
    pub fn observe_request(&self, route: Route, status: u16, elapsed: Duration) {
        let index = route as usize; // `ALL` is in declaration order (tested)
        self.requests[index][status_class_index(status)].inc();
        self.request_duration[index].observe_duration(elapsed);
    }

    /// One run of a tool, however it ended.
    pub fn observe_tool_run(&self, tool: &str, outcome: ToolOutcome, elapsed: Duration) {
        self.tool_runs.with(&[tool, outcome.label()]).inc();
        self.tool_run_duration
            .with(&[tool])
            .observe_duration(elapsed);
    }

    /// One submitted call, by the transport it came in by.
    pub fn observe_submission(&self, transport: Transport, outcome: SubmitOutcome) {
        self.submissions
            .with(&[transport.label(), outcome.label()])
            .inc();
    }

    /// One cancel request, by what it answered.
    pub fn observe_cancel(&self, outcome: CancelOutcome) {
        self.cancels.with(&[outcome.label()]).inc();
    }

    /// Create the zero series of a tool, so its rates exist before it first runs.
    pub fn declare_tool(&self, tool: &str) {
        for outcome in [
            ToolOutcome::Succeeded,
            ToolOutcome::RetryableFailure,
            ToolOutcome::PermanentFailure,
            ToolOutcome::Stopped,
        ] {
            self.tool_runs.with(&[tool, outcome.label()]);
        }
        self.tool_run_duration.with(&[tool]);
        self.operator.declare_tool(tool);
    }

    /// Create the zero series of a tool's limit, so its rates exist before
    /// its first call waits.
    pub fn declare_limit(&self, tool: &str, limit: WaitedOn) {
        self.limit_wait.with(&[tool, limit.label()]);
        self.limit_deferrals.with(&[tool, limit.label()]);
    }

    /// A call of a limited tool claimed after `waited` since it was due.
    pub fn observe_limit_wait(&self, tool: &str, limit: WaitedOn, waited: Duration) {
        self.limit_wait
            .with(&[tool, limit.label()])
            .observe_duration(waited);
    }

    /// A claim left due calls of `tool` pending: `limit` had no room.
    pub fn count_limit_deferral(&self, tool: &str, limit: WaitedOn) {
        self.limit_deferrals.with(&[tool, limit.label()]).inc();
    }

    /// One write transaction of the writer thread.
    pub fn observe_writer_batch(&self, operations: usize, commit: Duration) {
        self.writer_batches.inc();
        self.writer_batch_operations.observe(operations as f64);
        self.writer_commit_duration.observe_duration(commit);
    }

    /// The `Content-Type` of [`Metrics::render`].
    pub fn content_type(&self) -> &'static str {
        CONTENT_TYPE
    }

    /// A scrape: read the database once through the probe, then render every
    /// family. Scrapes are serialised by the probe lock, so two at once never
    /// mix each other's snapshots.
    pub fn render(&self) -> String {
        let probe = lock(&self.probe);
        let snapshot = match probe.as_ref().map(|probe| probe()) {
            Some(Ok(snapshot)) => Some(snapshot),
            Some(Err(cause)) => {
                crate::log::warn("metrics: database read failed")
                    .cause(cause.as_ref())
                    .emit();
                self.database_errors.inc();
                None
            }
            None => None,
        };
        *lock(&self.snapshot) = snapshot;
        self.registry.render()
    }
}
