//! The `webhooks` thread: it delivers the outbox (`notifications`, written
//! in the same transaction as each gated call, so a restart loses none),
//! every `POLL_EVERY` and at once when rung. Each due notification is
//! claimed for one attempt (the store's conditional update: one deliverer
//! per attempt, on any node), signed, `POST`ed to its tenant's URL with
//! the Standard Webhooks headers, and settled: gone once a 2xx answers,
//! else due again after a doubling delay, until `MAX_ATTEMPTS` (about
//! half an hour), after which it is given up and logged.
//!
//! Delivery is at least once: a crash after the POST and before the
//! settle sends the same message (same `webhook-id`) again, which a
//! Standard Webhooks consumer drops. It never blocks a call — the call path
//! only rings the bell — and never logs a URL, a secret or a body: a
//! failure is logged by tenant, call, attempt and a fixed reason.

use super::{payload, sign};
use crate::auth::WebhookTarget;
use crate::lock::lock;
use crate::log;
use crate::metrics::{DeliveryOutcome, Metrics};
use crate::store::{CallStore, Delivery, Notification};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ureq::tls::{RootCerts, TlsConfig};

/// How often the outbox is read when nothing rings.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// Notifications claimed per read.
const BATCH: usize = 16;
/// How long a claimed attempt is held from other deliverers: longer than
/// one POST may take.
const HOLD: Duration = Duration::from_secs(60);
/// One POST's bound, connection to last byte.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts before a notification is given up: 1 s doubling to 5 min apart,
/// about half an hour in all.
pub const MAX_ATTEMPTS: i64 = 15;
const MAX_DELAY: Duration = Duration::from_secs(300);

/// The webhook thread, and the bell that wakes it.
pub struct Webhooks {
    bell: Mutex<Option<mpsc::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Webhooks {
    /// No thread: no tenant has a webhook (and no notification is written).
    pub fn none() -> Webhooks {
        Webhooks {
            bell: Mutex::new(None),
            thread: Mutex::new(None),
        }
    }

    /// Start the thread for `targets` (tenant name, webhook).
    pub fn start(
        store: Arc<CallStore>,
        targets: Vec<(String, WebhookTarget)>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Webhooks> {
        if targets.is_empty() {
            return Ok(Webhooks::none());
        }
        let (bell, rung) = mpsc::channel();
        let deliverer = Deliverer {
            store,
            targets,
            metrics,
            agent: agent(),
        };
        let thread = std::thread::Builder::new()
            .name("webhooks".into())
            .spawn(move || deliverer.run(&rung))?;
        Ok(Webhooks {
            bell: Mutex::new(Some(bell)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Deliver now rather than at the next poll.
    pub fn ring(&self) {
        if let Some(bell) = lock(&self.bell).as_ref() {
            let _ = bell.send(());
        }
    }

    /// End the thread once its attempt in flight is over, and join it.
    /// Notifications not yet delivered stay in the outbox.
    pub fn stop(&self) {
        drop(lock(&self.bell).take());
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the thread holds.
struct Deliverer {
    store: Arc<CallStore>,
    targets: Vec<(String, WebhookTarget)>,
    metrics: Arc<Metrics>,
    agent: ureq::Agent,
}

/// Why an attempt failed, in fixed words (a transport error's text may
/// name the URL, which is a secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Status(u16),
    Timeout,
    Unreachable,
    Tls,
    Other,
    /// This process has no webhook for the tenant (its auth file differs
    /// from the node's that wrote the notification).
    NotConfigured,
}

impl Failure {
    fn label(self) -> &'static str {
        match self {
            Failure::Status(_) => "status",
            Failure::Timeout => "timeout",
            Failure::Unreachable => "unreachable",
            Failure::Tls => "tls",
            Failure::Other => "error",
            Failure::NotConfigured => "not_configured",
        }
    }
}

impl Deliverer {
    /// Deliver whatever is due, then wait for the bell or the next poll,
    /// until the bell is dropped.
    fn run(&self, rung: &mpsc::Receiver<()>) {
        loop {
            self.deliver_due();
            match rung.recv_timeout(POLL_EVERY) {
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn deliver_due(&self) {
        loop {
            let taken = match self.store.take_notifications(BATCH, HOLD) {
                Ok(taken) => taken,
                Err(e) => {
                    return log::warn("webhook outbox not read")
                        .event("webhook_outbox_failed")
                        .cause(&e)
                        .emit()
                }
            };
            let full = taken.len() == BATCH;
            for notification in taken {
                self.attempt(&notification);
            }
            if !full {
                return;
            }
        }
    }

    /// One attempt of one notification, and what became of it.
    fn attempt(&self, notification: &Notification) {
        let outcome = match self.target(&notification.tenant) {
            Some(target) => self.post(target, notification),
            None => Err(Failure::NotConfigured),
        };
        let delivery = match outcome {
            Ok(()) => Delivery::Delivered,
            Err(_) if notification.attempts >= MAX_ATTEMPTS => Delivery::GaveUp,
            Err(_) => Delivery::RetryIn(delay_after(notification.attempts)),
        };
        self.report(notification, outcome.err(), delivery);
        if let Err(e) =
            self.store
                .settle_notification(&notification.msg_id, notification.attempts, delivery)
        {
            // Its hold lapses and it is tried again: at least once.
            log::warn("webhook attempt not recorded")
                .event("webhook_settle_failed")
                .call_id(&notification.call.call_id)
                .cause(&e)
                .emit();
        }
    }

    fn target(&self, tenant: &str) -> Option<&WebhookTarget> {
        self.targets
            .iter()
            .find(|(name, _)| name == tenant)
            .map(|(_, target)| target)
    }

    /// `POST` the notification, signed; a 2xx is delivered.
    fn post(&self, target: &WebhookTarget, notification: &Notification) -> Result<(), Failure> {
        let body = payload::body(notification);
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let signature = sign::signature(&target.key, &notification.msg_id, timestamp, &body);
        let sent = self
            .agent
            .post(&target.url)
            .header("Content-Type", "application/json")
            .header("webhook-id", &notification.msg_id)
            .header("webhook-timestamp", &timestamp.to_string())
            .header("webhook-signature", &signature)
            .send(&body[..]);
        match sent {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(Failure::Status(response.status().as_u16())),
            Err(ureq::Error::Timeout(_)) => Err(Failure::Timeout),
            Err(ureq::Error::Io(io)) if io.kind() == std::io::ErrorKind::TimedOut => {
                Err(Failure::Timeout)
            }
            Err(ureq::Error::Rustls(_)) => Err(Failure::Tls),
            Err(ureq::Error::HostNotFound | ureq::Error::ConnectionFailed | ureq::Error::Io(_)) => {
                Err(Failure::Unreachable)
            }
            Err(_) => Err(Failure::Other),
        }
    }

    /// One line per attempt that did not deliver (and one when a message is
    /// given up), counted by outcome.
    fn report(&self, notification: &Notification, failure: Option<Failure>, delivery: Delivery) {
        let outcome = match delivery {
            Delivery::Delivered => DeliveryOutcome::Delivered,
            Delivery::RetryIn(_) => DeliveryOutcome::Retried,
            Delivery::GaveUp => DeliveryOutcome::GaveUp,
        };
        self.metrics.approvals.observe_delivery(outcome);
        let Some(failure) = failure else {
            return log::debug("webhook delivered")
                .event("webhook_delivered")
                .tenant(&notification.tenant)
                .call_id(&notification.call.call_id)
                .number("attempt", notification.attempts as u64)
                .emit();
        };
        let line = match delivery {
            Delivery::GaveUp => log::error("webhook given up").event("webhook_given_up"),
            _ => log::warn("webhook attempt failed").event("webhook_failed"),
        };
        let status = match failure {
            Failure::Status(status) => u64::from(status),
            _ => 0,
        };
        line.tenant(&notification.tenant)
            .call_id(&notification.call.call_id)
            .number("attempt", notification.attempts as u64)
            .label("why", failure.label())
            .number("status", status)
            .emit();
    }
}

/// The delay after failed attempt `attempts` (1-based): 1 s doubling, at
/// most `MAX_DELAY`.
fn delay_after(attempts: i64) -> Duration {
    let doubling = 2u32.saturating_pow(attempts.clamp(1, 31) as u32 - 1);
    Duration::from_secs(u64::from(doubling)).min(MAX_DELAY)
}

/// The HTTP client: one timeout, no redirects (a redirect would carry the
/// signed body elsewhere), no proxy from the environment, the system's
/// roots.
fn agent() -> ureq::Agent {
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::Specific(Arc::new(
            crate::tools::system_roots().clone(),
        )))
        .build();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(TIMEOUT))
        .proxy(None)
        .user_agent("idempotent-tool")
        .tls_config(tls)
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_their_bound_and_the_bound_is_about_half_an_hour() {
        assert_eq!(delay_after(1), Duration::from_secs(1));
        assert_eq!(delay_after(2), Duration::from_secs(2));
        assert_eq!(delay_after(9), Duration::from_secs(256));
        assert_eq!(delay_after(10), MAX_DELAY);
        assert_eq!(delay_after(99), MAX_DELAY);
        let total: Duration = (1..MAX_ATTEMPTS).map(delay_after).sum();
        assert!(
            (Duration::from_secs(25 * 60)..Duration::from_secs(45 * 60)).contains(&total),
            "{total:?}"
        );
    }
}
