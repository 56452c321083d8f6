//! The `Notifier`: how a request waiting (`?wait=`) for a call learns that
//! the call may have changed. Waiters are keyed by call id, so a completion
//! wakes only the requests waiting for that call (a thousand waiters on a
//! thousand calls do not all re-read the database on every completion), and
//! the runner hands it the calls of a whole batch of completions at once.
//!
//! It only wakes waiters; what a waiter then reads is the database's answer,
//! never this module's. It never touches the store, and it keeps nothing for a
//! call nobody waits for.

use crate::lock::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a waiter re-reads the database even without a wake-up: another
/// process on the same file may complete the call.
const WAIT_RECHECK: Duration = Duration::from_millis(100);

/// Wakes requests that wait for a call to reach a terminal state.
pub struct Notifier {
    /// The calls someone waits for. One lock for the map and every call's
    /// condition variable, so a wake-up can never fall between a waiter's
    /// last look and its wait.
    waiting: Mutex<HashMap<String, Waiters>>,
    /// Set when the service stops: every wait ends at once.
    stopping: AtomicBool,
    recheck: Duration,
}

/// The requests waiting for one call.
struct Waiters {
    /// How many times the call was signalled while someone waited for it.
    signals: u64,
    /// How many requests wait; the entry goes when the last one leaves.
    count: usize,
    woken: Arc<Condvar>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier::with_recheck(WAIT_RECHECK)
    }
}

/// A waiter's place in the map, given up on drop (however the wait ends).
struct Registration<'a> {
    notifier: &'a Notifier,
    call_id: &'a str,
    woken: Arc<Condvar>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut waiting = lock(&self.notifier.waiting);
        if let Some(waiters) = waiting.get_mut(self.call_id) {
            waiters.count -= 1;
            if waiters.count == 0 {
                waiting.remove(self.call_id);
            }
        }
    }
}

impl Notifier {
    /// A notifier whose waiters re-read at least every `recheck` without a
    /// wake-up.
    pub fn with_recheck(recheck: Duration) -> Notifier {
        Notifier {
            waiting: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            recheck,
        }
    }

    /// End every wait now and refuse to wait again: a stopping service
    /// answers each waiting request with the call as it is.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let mut waiting = lock(&self.waiting);
        for waiters in waiting.values_mut() {
            waiters.signals += 1;
            waiters.woken.notify_all();
        }
    }

    /// Wake the waiters of these calls (a batch of completions: one lock for
    /// all of them). Calls nobody waits for cost a lookup.
    pub fn notify<'a>(&self, call_ids: impl IntoIterator<Item = &'a str>) {
        let mut waiting = lock(&self.waiting);
        if waiting.is_empty() {
            return;
        }
        for call_id in call_ids {
            if let Some(waiters) = waiting.get_mut(call_id) {
                waiters.signals += 1;
                waiters.woken.notify_all();
            }
        }
    }

    /// Call `check` until it returns `Some` or `deadline` passes; `check` runs
    /// again after every signal for `call_id` and at least every 100 ms, and
    /// once more when the notifier stops.
    pub fn wait_for<T>(
        &self,
        call_id: &str,
        deadline: Instant,
        mut check: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let registration = self.register(call_id);
        loop {
            let seen = self.signals(call_id);
            if let Some(found) = check() {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline || self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            self.sleep_until_signalled(
                &registration,
                seen,
                now + (deadline - now).min(self.recheck),
            );
        }
    }

    fn register<'a>(&'a self, call_id: &'a str) -> Registration<'a> {
        let mut waiting = lock(&self.waiting);
        let waiters = waiting
            .entry(call_id.to_string())
            .or_insert_with(|| Waiters {
                signals: 0,
                count: 0,
                woken: Arc::new(Condvar::new()),
            });
        waiters.count += 1;
        Registration {
            notifier: self,
            call_id,
            woken: Arc::clone(&waiters.woken),
        }
    }

    fn signals(&self, call_id: &str) -> u64 {
        lock(&self.waiting).get(call_id).map_or(0, |w| w.signals)
    }

    /// Block until the call is signalled past `seen`, the notifier stops, or
    /// `until`. A spurious wake-up goes back to sleep, so `check` runs only for
    /// a real signal or the periodic re-read.
    fn sleep_until_signalled(&self, registration: &Registration<'_>, seen: u64, until: Instant) {
        let mut waiting = lock(&self.waiting);
        loop {
            let signalled = waiting
                .get(registration.call_id)
                .is_some_and(|w| w.signals != seen);
            let left = until.saturating_duration_since(Instant::now());
            if signalled || left.is_zero() || self.stopping.load(Ordering::SeqCst) {
                return;
            }
            waiting = registration
                .woken
                .wait_timeout(waiting, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// How many requests wait now, over all calls.
    #[cfg(test)]
    fn waiters(&self) -> usize {
        lock(&self.waiting).values().map(|w| w.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn eventually(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A completion wakes only the waiters of its own call: the waiter on
    /// `b` runs its check once while `a` is signalled three times (each of
    /// which runs `a`'s check), and once more when the notifier stops.
    #[test]
    fn a_completion_wakes_only_its_own_calls_waiters() {
        // No periodic re-read during the test: every check is a wake-up.
        let notifier = Notifier::with_recheck(Duration::from_secs(600));
        let (a_checks, b_checks) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let deadline = Instant::now() + Duration::from_secs(600);
        std::thread::scope(|scope| {
            let a = scope.spawn(|| {
                notifier.wait_for("a", deadline, || {
                    (a_checks.fetch_add(1, Ordering::SeqCst) + 1 == 4).then_some(())
                })
            });
            let b = scope.spawn(|| {
                notifier.wait_for("b", deadline, || {
                    b_checks.fetch_add(1, Ordering::SeqCst);
                    None::<()>
                })
            });
            eventually("both waiters", || notifier.waiters() == 2);
            for signal in 1..=3 {
                // `a` reads its signal count before each check: once the check
                // has started, the next signal is one more wake-up, never
                // folded into this one.
                eventually("a to check", || a_checks.load(Ordering::SeqCst) == signal);
                notifier.notify(["a", "c"]);
            }
            assert_eq!(a.join().unwrap(), Some(()));
            assert_eq!(a_checks.load(Ordering::SeqCst), 4, "one check per signal");
            assert_eq!(b_checks.load(Ordering::SeqCst), 1, "b was never woken");
            notifier.stop();
            assert_eq!(b.join().unwrap(), None, "a stop ends every wait");
            assert_eq!(b_checks.load(Ordering::SeqCst), 2, "one last look at stop");
        });
        assert_eq!(notifier.waiters(), 0, "ended waits leave nothing behind");
    }

    /// Several requests waiting for one call are all woken by its signal.
    #[test]
    fn every_waiter_of_a_call_is_woken() {
        let notifier = Notifier::with_recheck(Duration::from_secs(600));
        let done = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(600);
        std::thread::scope(|scope| {
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    scope.spawn(|| {
                        notifier
                            .wait_for("x", deadline, || done.load(Ordering::SeqCst).then_some(()))
                    })
                })
                .collect();
            eventually("three waiters", || notifier.waiters() == 3);
            done.store(true, Ordering::SeqCst);
            notifier.notify(["x"]);
            for waiter in waiters {
                assert_eq!(waiter.join().unwrap(), Some(()));
            }
        });
    }
}
