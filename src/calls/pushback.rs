//! Pushback: past `--max-pending` calls queued for a worker, a request that
//! may create a call is refused `503 overloaded` before it joins the write
//! queue, so the backlog stays bounded however many clients send, and the
//! workers' completions keep the writer's time. A known key is answered
//! before this is asked (its retry adds nothing to the backlog).
//!
//! It reads only the queued-calls gauge the runner keeps; it never touches
//! the store or the runner.

use super::error::CallError;
use crate::metrics::Metrics;
use std::time::Duration;

/// How long a refusal is held before it is sent.
const OVERLOADED_HOLD: Duration = Duration::from_millis(20);

/// The bound on calls waiting for a worker.
pub(super) struct Pushback {
    /// `--max-pending`.
    max_pending: usize,
}

impl Pushback {
    pub(super) fn new(max_pending: usize) -> Pushback {
        Pushback { max_pending }
    }

    /// `Err(Overloaded)` once `max_pending` calls wait for a worker.
    pub(super) fn refuse_if_overloaded(&self, metrics: &Metrics) -> Result<(), CallError> {
        let pending = metrics.queued_calls.get().max(0.0) as usize;
        if pending >= self.max_pending {
            metrics.overloaded.inc();
            // A client that ignores `Retry-After` asks again at once; holding
            // the refusal a moment keeps such clients from spending the CPU
            // the workers need to drain the backlog (it costs this connection's
            // thread a sleep, no CPU).
            std::thread::sleep(OVERLOADED_HOLD);
            return Err(CallError::Overloaded {
                pending,
                max: self.max_pending,
            });
        }
        Ok(())
    }
}
