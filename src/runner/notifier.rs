//! The `Notifier`: how a request waiting (`?wait=`) for a call learns that
//! something finished. It only wakes waiters; what a waiter then reads is the
//! database's answer, never this module's. It never touches the store.

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Wakes requests that wait for a call to reach a terminal state.
#[derive(Default)]
pub struct Notifier {
    completions: Mutex<u64>,
    changed: Condvar,
    /// Set when the service stops: every wait ends at once.
    stopping: AtomicBool,
}

/// How often a waiter re-reads the database even without a wake-up: another
/// process on the same file may complete the call.
const WAIT_RECHECK: Duration = Duration::from_millis(100);

impl Notifier {
    /// End every wait now and refuse to wait again: a stopping service
    /// answers each waiting request with the call as it is.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.notify();
    }

    pub fn notify(&self) {
        *lock(&self.completions) += 1;
        self.changed.notify_all();
    }

    /// Call `check` until it returns `Some` or `deadline` passes; `check` runs
    /// again after every completion in this process and at least every 100 ms.
    pub fn wait_for<T>(
        &self,
        deadline: Instant,
        mut check: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        loop {
            let seen = *lock(&self.completions);
            if let Some(found) = check() {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline || self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            let guard = lock(&self.completions);
            if *guard == seen {
                let timeout = (deadline - now).min(WAIT_RECHECK);
                let _ = self.changed.wait_timeout(guard, timeout);
            }
        }
    }
}
