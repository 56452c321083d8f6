//! `GET /v1/verify`, the promise check: `idempotent-tool verify` run by the
//! service on its own database, on demand, for an admin, and answered as
//! JSON (`200` with the verdict and every check, or `503 unavailable` when
//! it did not finish in the time asked).
//!
//! It owns the one check that may run at a time: the check runs on a thread
//! of its own (`promise-check`), never on the request's, with a deadline the
//! store enforces (SQLite is interrupted, PostgreSQL's statements time out);
//! a request that comes while one runs joins it and gets its answer. It must
//! never take a connection that calls' reads or writes wait for (the store
//! opens one for the check), run two checks at once, or hold a request past
//! the time it asked for.

use super::error::ApiError;
use crate::http::{ErrorCode, Request, Response};
use crate::input::quote;
use crate::lock::lock;
use crate::store::verify::{Report, VerifyError};
use crate::store::{now, CallStore};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `?timeout_s=` when absent.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a request may ask for.
pub const MAX_TIMEOUT_SECS: f64 = 60.0;

/// How long past its own deadline a request waits for the check to say so
/// (the SQLite answer also waits for the sync covering what it read).
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// What a finished check answers: the report as JSON, or why there is none.
type Outcome = Result<Value, String>;

/// The one check that may run, shared with its thread.
pub struct PromiseCheck {
    store: Arc<CallStore>,
    /// The tools whose successes write effects (`ToolRegistry::effect_tools`).
    effect_tools: Arc<Vec<String>>,
    running: Arc<Mutex<Option<Arc<Run>>>>,
}

/// One run of the check: when it must end, and its answer once there is one.
struct Run {
    deadline: Instant,
    outcome: Mutex<Option<Outcome>>,
    finished: Condvar,
}

impl PromiseCheck {
    pub fn new(store: Arc<CallStore>, effect_tools: Vec<String>) -> PromiseCheck {
        PromiseCheck {
            store,
            effect_tools: Arc::new(effect_tools),
            running: Arc::new(Mutex::new(None)),
        }
    }

    /// `GET /v1/verify?timeout_s=N`.
    pub(super) fn answer(&self, req: &Request) -> Result<Response, ApiError> {
        let timeout = timeout_param(req)?;
        let started = Instant::now();
        let checked_at = now();
        let Some(run) = self.join_or_start(started + timeout) else {
            return Ok(Response::from_error(
                ErrorCode::Unavailable,
                "no check could start within timeout_s (one asked with less time was still ending); ask again",
            ));
        };
        let outcome = wait_for(&run, started + timeout + ANSWER_GRACE);
        match outcome {
            Some(Ok(mut report)) => {
                report["checked_at"] = json!(checked_at);
                report["elapsed_s"] = json!(started.elapsed().as_secs_f64());
                Ok(Response::json(200, &report))
            }
            Some(Err(why)) => Ok(Response::from_error(ErrorCode::Unavailable, why)),
            None => Ok(Response::from_error(
                ErrorCode::Unavailable,
                format_args!(
                    "the check did not finish within {} s; ask again with a longer timeout_s",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// A run whose answer is this request's: the one in progress if it may
    /// run at least until `deadline`, else (a shorter one is ending) a new
    /// one once that one is over, on its own thread, stopped at `deadline`.
    /// `None` if no thread could be started, or the other run outlived
    /// `deadline`.
    fn join_or_start(&self, deadline: Instant) -> Option<Arc<Run>> {
        loop {
            let mut running = lock(&self.running);
            match &*running {
                Some(run) if run.deadline >= deadline => return Some(Arc::clone(run)),
                Some(run) => {
                    let shorter = Arc::clone(run);
                    drop(running);
                    let _ended = wait_for(&shorter, deadline)?;
                }
                None => {
                    let run = self.start(deadline)?;
                    *running = Some(Arc::clone(&run));
                    return Some(run);
                }
            }
        }
    }

    /// A new run on its own thread, stopped at `deadline`; it empties the
    /// slot when it ends.
    fn start(&self, deadline: Instant) -> Option<Arc<Run>> {
        let run = Arc::new(Run {
            deadline,
            outcome: Mutex::new(None),
            finished: Condvar::new(),
        });
        let store = Arc::clone(&self.store);
        let tools = Arc::clone(&self.effect_tools);
        let slot = Arc::clone(&self.running);
        let mine = Arc::clone(&run);
        std::thread::Builder::new()
            .name("promise-check".into())
            .spawn(move || {
                let names: Vec<&str> = tools.iter().map(String::as_str).collect();
                let outcome = store
                    .verify_until(&names, deadline)
                    .map(|report| report_json(&report, store.backend_name()))
                    .map_err(|e| refusal(&e));
                let mut running = lock(&slot);
                if running.as_ref().is_some_and(|r| Arc::ptr_eq(r, &mine)) {
                    *running = None;
                }
                *lock(&mine.outcome) = Some(outcome);
                mine.finished.notify_all();
            })
            .inspect_err(|e| {
                crate::log::warn("cannot start the promise check")
                    .event("promise_check_not_started")
                    .cause(e)
                    .emit();
            })
            .ok()?;
        Some(run)
    }
}

/// The run's answer, or `None` if it has none by `deadline`.
fn wait_for(run: &Run, deadline: Instant) -> Option<Outcome> {
    let mut outcome = lock(&run.outcome);
    loop {
        if let Some(done) = &*outcome {
            return Some(done.clone());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        outcome = run
            .finished
            .wait_timeout(outcome, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// What a client is told when the check could not give a verdict: never a
/// password (the store masks its URL), always a reason to try again.
fn refusal(e: &VerifyError) -> String {
    match e {
        VerifyError::TimedOut => {
            "the check did not finish within timeout_s; ask again with a longer one".into()
        }
        other => format!("the check could not read the database: {other}"),
    }
}

/// `?timeout_s=SECONDS`: more than 0, at most 60; default 10. Any other
/// parameter is refused, naming it.
fn timeout_param(req: &Request) -> Result<Duration, ApiError> {
    let mut timeout = DEFAULT_TIMEOUT;
    for pair in req.query.as_deref().unwrap_or("").split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "timeout_s" {
            return Err(ApiError::BadRequest(format!(
                "unknown query parameter {}; /v1/verify takes only timeout_s",
                quote(name)
            )));
        }
        timeout = value
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s <= MAX_TIMEOUT_SECS)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "timeout_s must be a number of seconds above 0 and at most 60, not {}",
                    quote(value)
                ))
            })?;
    }
    Ok(timeout)
}

/// The report as `GET /v1/verify` answers it: the verdict, the counts, and
/// every check with its violations (`detail` says the first few; `null`
/// when it holds).
fn report_json(report: &Report, backend: &str) -> Value {
    let counts = |pairs: &[(String, i64)]| -> Map<String, Value> {
        pairs.iter().map(|(k, n)| (k.clone(), json!(n))).collect()
    };
    let checks: Vec<Value> = report
        .checks
        .iter()
        .map(|check| {
            let ok = check.violations == 0;
            let detail = (!ok).then(|| {
                let more = check.violations.saturating_sub(check.examples.len());
                let tail = if more > 0 {
                    format!(" (and {more} more)")
                } else {
                    String::new()
                };
                format!(
                    "{} × {}: {}{tail}",
                    check.violations,
                    check.name,
                    check.examples.join("; ")
                )
            });
            json!({
                "name": check.name,
                "ok": ok,
                "invariant": check.invariant,
                "violations": check.violations,
                "examples": check.examples,
                "detail": detail,
            })
        })
        .collect();
    json!({
        "ok": report.is_clean(),
        "backend": backend,
        "calls": report.calls,
        "by_status": counts(&report.by_status),
        "effects": report.effects,
        "audit": counts(&report.audit),
        "tenants": report.tenants,
        "checks": checks,
    })
}
