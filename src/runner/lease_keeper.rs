//! Lease heartbeats: while a tool runs, its lease is extended every third of
//! `--lease-secs`, so a tool may run far longer than the lease (up to its own
//! timeout) without another executor taking the call over.
//!
//! A worker registers its lease for exactly as long as its tool runs (the
//! `Kept` guard); the runner's heartbeat thread extends every registered
//! lease in one write, through the same fence as a completion (`running`
//! under the lease's attempt). A lease the store reports lost — it expired
//! and was taken over, or was released — is dropped at once and never
//! extended again; that worker's completion is then discarded by the fence
//! (`stale_completion`), exactly as before heartbeats existed.
//!
//! It never extends a lease whose tool has returned: a worker that stalls
//! between its tool and its completion (a pause) lets its lease expire, and
//! its completion is fenced off. It never decides who executes a call.

use crate::store::{CallStore, Lease};
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The leases of tools running now, keyed by call and attempt (a call whose
/// lease was taken over may briefly run twice in one process).
#[derive(Default)]
pub(super) struct LeaseKeeper {
    leases: Mutex<HashMap<(String, i64), Lease>>,
}

/// A lease registered for extension; dropping it (the tool returned, or
/// panicked) stops the extension.
pub(super) struct Kept<'a> {
    keeper: &'a LeaseKeeper,
    key: (String, i64),
}

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        lock(&self.keeper.leases).remove(&self.key);
    }
}

impl LeaseKeeper {
    /// Extend `lease` until the returned guard is dropped.
    pub(super) fn keep(&self, lease: &Lease) -> Kept<'_> {
        let key = (lease.call_id.clone(), lease.attempt);
        lock(&self.leases).insert(key.clone(), lease.clone());
        Kept { keeper: self, key }
    }

    /// Extend every registered lease to `lease` from now, in one write. A
    /// lease found lost is dropped so it is not extended again; the lock is
    /// not held while the store writes.
    pub(super) fn extend_all(&self, store: &CallStore, lease: Duration) {
        let leases: Vec<Lease> = lock(&self.leases).values().cloned().collect();
        if leases.is_empty() {
            return;
        }
        let held = match store.extend(&leases, lease) {
            Ok(held) => held,
            Err(e) => {
                return crate::log::warn("leases not extended")
                    .event("lease_extension_failed")
                    .cause(&e)
                    .emit()
            }
        };
        let mut registered = lock(&self.leases);
        for (lease, held) in leases.iter().zip(held) {
            let key = (lease.call_id.clone(), lease.attempt);
            if !held && registered.remove(&key).is_some() {
                crate::log::warn(
                    "lease lost; no longer extended, its completion will be discarded",
                )
                .event("lease_lost")
                .call_id(&lease.call_id)
                .attempt(lease.attempt)
                .emit();
            }
        }
    }

    #[cfg(test)]
    fn registered(&self) -> usize {
        lock(&self.leases).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewCall, StoreOptions};
    use crate::temp::TempDb;

    fn new_call(key: &str) -> NewCall {
        NewCall {
            tenant: crate::auth::ANONYMOUS.into(),
            idem_key: key.into(),
            fingerprint: "fp".into(),
            tool: "sleep".into(),
            args_json: "{}".into(),
            client_id: None,
            seq: None,
        }
    }

    /// A kept lease moves forward while its guard lives; a lease taken over
    /// is reported lost and dropped; a dropped guard stops the extension.
    #[test]
    fn kept_leases_are_extended_and_lost_ones_dropped() {
        let db = TempDb::new("lease-keeper");
        let store = CallStore::open(&db.path, StoreOptions::default()).unwrap();
        let id = |key: &str| match store.create_or_get(new_call(key)).unwrap() {
            crate::store::Created::New(call) => call.call_id,
            other => panic!("{other:?}"),
        };
        let (a, b) = (id("a"), id("b"));
        let short = Duration::from_millis(1);
        let lease_a = store.claim(&a, "1:w@i", short).unwrap().unwrap();
        let lease_b = store.claim(&b, "1:w@i", short).unwrap().unwrap();
        let keeper = LeaseKeeper::default();
        let kept_a = keeper.keep(&lease_a);
        let _kept_b = keeper.keep(&lease_b);
        std::thread::sleep(Duration::from_millis(5));
        // b's lease expired and someone else took it: attempt 2.
        assert!(store
            .claim(&b, "2:w@j", Duration::from_secs(30))
            .unwrap()
            .is_some());
        keeper.extend_all(&store, Duration::from_secs(60));
        let until = store.get(&a).unwrap().unwrap().lease_until.unwrap();
        assert!(until > crate::store::now() + 50.0, "a was extended");
        assert_eq!(keeper.registered(), 1, "b was lost and dropped");
        drop(kept_a);
        assert_eq!(keeper.registered(), 0);
        store.stop();
    }
}
