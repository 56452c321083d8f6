//! `HealthCache`: the last health check and when it was made, so that
//! `/healthz` stays as cheap as a constant between checks. A leaf of `api`:
//! `Api` holds one (`service`), `/healthz` reads it (`operations`).

use crate::lock::lock;
use crate::store::Health;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one health check answers for. A check opens a new connection to
/// the database (a pooled one would not notice the file becoming unreadable),
/// so `/healthz` stays as cheap as a constant between checks; a problem shows
/// within a second.
const HEALTH_FRESH_FOR: Duration = Duration::from_secs(1);

/// The last health check and when it was made. A healthy verdict still
/// fresh is read from two atomics, without a lock: `/healthz` is the bench's
/// HTTP-only calibration, and twenty clients would otherwise queue on a mutex.
pub struct HealthCache {
    /// Microseconds since `epoch` until which a healthy verdict holds; 0:
    /// none (unhealthy, or never checked).
    healthy_until_us: AtomicU64,
    epoch: Instant,
    /// The last verdict, and the lock one checker holds while checking.
    last: Mutex<Option<(Instant, Health)>>,
}

impl Default for HealthCache {
    fn default() -> Self {
        HealthCache {
            healthy_until_us: AtomicU64::new(0),
            epoch: Instant::now(),
            last: Mutex::new(None),
        }
    }
}

impl HealthCache {
    /// Whether a healthy verdict younger than `HEALTH_FRESH_FOR` stands.
    pub(super) fn fresh_and_healthy(&self) -> bool {
        let now = self.epoch.elapsed().as_micros() as u64;
        now < self.healthy_until_us.load(Ordering::Acquire)
    }

    /// A fresh enough verdict, checking again (one thread at a time) when
    /// the last one is older than `HEALTH_FRESH_FOR`.
    pub(super) fn get(&self, check: impl FnOnce() -> Health) -> Health {
        let mut last = lock(&self.last);
        match &*last {
            Some((at, health)) if at.elapsed() < HEALTH_FRESH_FOR => health.clone(),
            _ => {
                let health = check();
                let checked = Instant::now();
                let until = if health.database.is_ok() && health.writer.is_ok() {
                    (checked + HEALTH_FRESH_FOR - self.epoch).as_micros() as u64
                } else {
                    0
                };
                self.healthy_until_us.store(until, Ordering::Release);
                *last = Some((checked, health.clone()));
                health
            }
        }
    }
}
