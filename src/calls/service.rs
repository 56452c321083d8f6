//! `Calls`: the call service both transports hold — its parts, its
//! constructor, and the reads: a tenant's call by id or by key, its audit
//! timeline, a running call's last progress, and the wait until a call
//! settles. Submitting is `submit`'s.
//!
//! Every read is made for one tenant: another tenant's call is not found,
//! never refused, so its existence does not leak. A read shows only what is
//! committed (the store's reads wait for the sync that covers them).

use super::key_cache::KeyCache;
use super::pushback::Pushback;
use crate::metrics::Metrics;
use crate::runner::{Notifier, Runner};
use crate::status::Status;
use crate::store::{AuditEvent, Call, CallProgress, CallStore, ListPage, ListQuery, StoreError};
use crate::tools::ToolRegistry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the call path behaves; filled from the command line, and wired to
/// the threads it wakes.
#[derive(Clone)]
pub struct CallsOptions {
    /// Whether chaos hooks are accepted in `args` (`--chaos`).
    pub chaos: bool,
    /// Calls queued for a worker past which a new call is refused
    /// `503 overloaded` (`--max-pending`).
    pub max_pending: usize,
    /// Rung when a new call starts waiting for approval (the webhook
    /// thread delivers its tenant's notification at once).
    pub on_approval_requested: Bell,
}

impl std::fmt::Debug for CallsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallsOptions")
            .field("chaos", &self.chaos)
            .field("max_pending", &self.max_pending)
            .finish_non_exhaustive()
    }
}

/// Submit, read and wait for calls, over one store and one runner.
pub struct Calls {
    pub(super) store: Arc<CallStore>,
    pub(super) runner: Arc<Runner>,
    /// Wakes a wait when a call of this process completes (or is cancelled).
    pub(super) notifier: Arc<Notifier>,
    /// The tools calls may name, with their argument rules.
    pub(super) tools: Arc<ToolRegistry>,
    /// Whether chaos hooks are accepted in `args`.
    pub(super) chaos: bool,
    /// What this process knows about idempotency keys, within a byte budget
    /// (shared with the purge, which makes it forget purged keys).
    pub(super) keys: Arc<KeyCache>,
    pub(super) pushback: Pushback,
    pub(super) metrics: Arc<Metrics>,
    /// Rung when a new call starts waiting for approval (the webhook
    /// thread delivers its tenant's notification at once).
    pub(super) on_approval_requested: Bell,
}

/// A hook the call path rings, without waiting, when something happens that
/// another thread acts on.
pub type Bell = Arc<dyn Fn() + Send + Sync>;

impl Calls {
    pub fn new(
        store: Arc<CallStore>,
        runner: Arc<Runner>,
        notifier: Arc<Notifier>,
        tools: Arc<ToolRegistry>,
        keys: Arc<KeyCache>,
        metrics: Arc<Metrics>,
        options: CallsOptions,
    ) -> Calls {
        Calls {
            store,
            runner,
            notifier,
            tools,
            chaos: options.chaos,
            keys,
            pushback: Pushback::new(options.max_pending),
            metrics,
            on_approval_requested: options.on_approval_requested,
        }
    }

    /// The tools calls may name.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The tenant's call `call_id`.
    pub fn get(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.store.get_for(tenant, call_id)
    }

    /// The tenant's call under idempotency key `key`.
    pub fn get_by_key(&self, tenant: &str, key: &str) -> Result<Option<Call>, StoreError> {
        self.store.find_by_key(tenant, key)
    }

    /// A page of calls, newest first (`CallStore::list`), within the
    /// query's tenant (or every tenant: the API decides who may ask).
    pub fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        self.store.list(query)
    }

    /// The audit rows of the tenant's call `call_id`, oldest first; `None`
    /// when the tenant has no such call.
    pub fn audit(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        self.store.audit_for(tenant, call_id)
    }

    /// Note in the tenant's call's audit that a keyless MCP request was
    /// answered with it by its content (`replayed_by_content`), through the
    /// store's write path: on the answer's way out, committed before it.
    pub fn note_replay_by_content(
        &self,
        tenant: &str,
        call_id: &str,
        window: Duration,
    ) -> Result<bool, StoreError> {
        self.store
            .note_replay_by_content(tenant, call_id, window.as_secs())
    }

    /// Hold until `call` is terminal, `wait` is over, or `gone()` says its
    /// client has hung up, and return the call as it then is. Re-reads the
    /// call after every completion in this process and at least every
    /// 100 ms (another process may finish it). A read borrows a pooled
    /// connection only while it runs, so a waiting request holds none. A
    /// client that has gone ends the wait at once: its thread and
    /// connection slot are freed instead of idling up to `MAX_WAIT_SECS`.
    pub fn wait(
        &self,
        call: Call,
        wait: Duration,
        gone: impl Fn() -> bool,
    ) -> Result<Call, StoreError> {
        let deadline = Instant::now() + wait;
        let call_id = call.call_id.clone();
        let mut latest = call;
        let mut failure = None;
        self.notifier.wait_for(&call_id, deadline, || {
            if gone() {
                return Some(());
            }
            match self.store.get(&latest.call_id) {
                Ok(Some(now)) => {
                    let done = now.status.is_terminal();
                    latest = now;
                    done.then_some(())
                }
                Ok(None) => None,
                Err(e) => {
                    failure = Some(e);
                    Some(())
                }
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(latest),
        }
    }
}

/// A running call's last progress: this process's own board when its
/// tool runs here (the freshest), else what the node running it stored
/// with the call at its last lease extension. `None` once it is not
/// running, or when its tool has reported nothing.
pub fn last_progress(call: &Call) -> Option<CallProgress> {
    if call.status != Status::Running {
        return None;
    }
    match crate::tools::progress::board().latest(&call.call_id) {
        Some(report) => Some(CallProgress {
            attempt: call.attempt,
            progress: report.progress,
            total: report.total,
            message: report.message,
            at: report.at,
        }),
        None => call.running_progress().cloned(),
    }
}
