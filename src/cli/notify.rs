//! What the service tells systemd under `Type=notify`
//! (`deploy/idempotent-tool.service`): `READY=1` once the port is bound,
//! recovery has run and the start-up line is out, so that units ordered
//! after it start against a service that answers; `STOPPING=1` as soon as a
//! stop begins. Nothing is sent without `NOTIFY_SOCKET` (not under systemd),
//! and a failed send is logged, never fatal: the service runs the same.
//!
//! The datagram itself is `sd-notify`'s (see README, Dependencies).

use crate::log;
use sd_notify::NotifyState;

/// The service answers: `READY=1`, with the start-up line as its status.
pub fn ready(banner: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(banner)]);
}

/// A stop has begun: `STOPPING=1`.
pub fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: finishing running tools, then exiting"),
    ]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        log::warn("cannot notify the service manager (NOTIFY_SOCKET)")
            .event("notify_failed")
            .cause(&e)
            .emit();
    }
}
