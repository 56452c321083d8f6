//! `KeyCache`: what this process has learnt about idempotency keys, so that
//! most requests cost no database read beyond the one the writer must make.
//!
//! It owns a bounded map from key to what is known about it, and must never
//! answer anything the database does not still say: it holds only facts that
//! no transition can change (a committed row's key and fingerprint; a final
//! call's whole answer), and whatever deletes a call row must `forget` its key.
//! It never grows past its byte budget, and never reads or writes the database.
//!
//! - A key it has never seen is almost always new. It goes straight to the
//!   writer, which looks the key up inside its transaction anyway; reading it
//!   first on a read connection cost the new-call rate about 15%.
//! - A key that has a row (created or found here) is read first: a retry of a
//!   call in progress is answered without joining the write queue.
//! - A final call (`succeeded`) keeps its rendered answer: a retry of it
//!   reads nothing. A failure or a cancel is not final — an operator may
//!   re-run it (`store::rerun`), on any node — so its retries read the row.
//! - It also keeps the body of the request it last answered (up to
//!   `REMEMBERED_REQUEST_BYTES`): a retry whose body is byte for byte that one
//!   is answered before its JSON is parsed or fingerprinted. The same bytes
//!   under the same tenant and key are the same request, read the same way,
//!   so they cannot be told anything else; any other body takes the full path.
//!
//! Every answer stays correct across processes and restarts: an unknown key
//! only takes the slower, authoritative path; a committed row's key and
//! fingerprint never change; and a succeeded row never changes at all (no
//! transition leaves that state). The fingerprint is kept so a conflicting
//! request still reaches the store and gets its `409`.
//!
//! **The bound is in bytes**: every entry is charged its key, its fingerprint,
//! its rendered answer and a fixed estimate of the map's own overhead, and the
//! oldest entries are evicted until a new one fits. Evicting costs only a
//! re-read (and, for a settled call, rendering its answer again), never a wrong
//! answer. An answer larger than the whole budget is not kept.

use crate::lock::lock;
use crate::store::now;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The `KeyCache` key of an idempotency key: its tenant, a space (never in
/// a tenant name or a key), and the key.
pub fn scoped_key(tenant: &str, idem_key: &str) -> String {
    format!("{tenant} {idem_key}")
}

/// The default budget: room for about a thousand answers with the largest
/// args (64 KiB), or several hundred thousand small ones.
pub const DEFAULT_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// What an entry costs beyond its key, fingerprint and answer: the hash-map
/// slot, the order index's node share, the shared key's header and the
/// allocator's per-allocation overhead, rounded up. An estimate; it keeps a
/// cache of many small entries from being charged far less than it uses.
const ENTRY_OVERHEAD: usize = 192;

/// The longest request body a settled entry keeps for byte-for-byte replays.
/// Agents retry with the bytes they sent; a longer body is still answered
/// from the cache, after it is parsed and fingerprinted.
pub const REMEMBERED_REQUEST_BYTES: usize = 4 * 1024;

/// What this process knows about idempotency keys, within a byte budget.
pub struct KeyCache {
    budget: usize,
    entries: Mutex<Entries>,
}

/// The entries and their insertion order, under one lock.
#[derive(Default)]
struct Entries {
    by_key: HashMap<Arc<str>, Entry>,
    /// Every entry's key by its stamp: the first is the oldest, evicted first.
    order: BTreeMap<u64, Arc<str>>,
    next_stamp: u64,
    /// The sum of every entry's `cost`.
    bytes: usize,
}

struct Entry {
    known: Known,
    /// Its place in `order`.
    stamp: u64,
    cost: usize,
}

/// One key's entry. Entries are keyed by `scoped_key` (tenant and key), so
/// two tenants' equal keys never meet.
enum Known {
    HasRow,
    Settled {
        fingerprint: String,
        call_id: String,
        body: Vec<u8>,
        /// The raw body of the request answered with `body`; empty when it
        /// was longer than `REMEMBERED_REQUEST_BYTES`.
        request: Vec<u8>,
        /// The call's `expires_at`: past it the call may have been purged,
        /// so the entry no longer answers (the purge also forgets it).
        expires_at: Option<f64>,
    },
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

impl KeyCache {
    /// A cache that never holds more than `budget` bytes; `0` keeps nothing.
    pub fn with_budget(budget: usize) -> KeyCache {
        KeyCache {
            budget,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The settled answer (call id and body) for this key and fingerprint, if
    /// there is one and its call cannot have been purged yet.
    pub(super) fn settled(&self, idem_key: &str, fingerprint: &str) -> Option<(String, Vec<u8>)> {
        self.settled_if(idem_key, |fp, _| fp == fingerprint)
    }

    /// The settled answer for this key when `request` is byte for byte the
    /// body it was last given for, and its call cannot have been purged yet.
    pub(super) fn settled_for_request(
        &self,
        idem_key: &str,
        request: &[u8],
    ) -> Option<(String, Vec<u8>)> {
        self.settled_if(idem_key, |_, known| !known.is_empty() && known == request)
    }

    /// The settled answer for this key when `matches(fingerprint, request)`
    /// says it is this request's, and its call cannot have been purged yet.
    fn settled_if(
        &self,
        idem_key: &str,
        matches: impl FnOnce(&str, &[u8]) -> bool,
    ) -> Option<(String, Vec<u8>)> {
        match &lock(&self.entries).by_key.get(idem_key)?.known {
            Known::Settled {
                fingerprint,
                call_id,
                body,
                request,
                expires_at,
            } if matches(fingerprint, request) && expires_at.is_none_or(|at| now() < at) => {
                Some((call_id.clone(), body.clone()))
            }
            _ => None,
        }
    }

    pub(super) fn has_row(&self, idem_key: &str) -> bool {
        lock(&self.entries).by_key.contains_key(idem_key)
    }

    pub(super) fn insert_has_row(&self, idem_key: &str) {
        let mut entries = lock(&self.entries);
        if !entries.by_key.contains_key(idem_key) {
            let cost = ENTRY_OVERHEAD + idem_key.len();
            entries.insert(idem_key.into(), Known::HasRow, cost, self.budget);
        }
    }

    /// Keep a settled call's answer `body`, given to a request whose body
    /// was `request` and whose fingerprint is `fingerprint`.
    pub(super) fn insert_settled(
        &self,
        idem_key: &str,
        fingerprint: String,
        call: (&str, Option<f64>),
        body: &[u8],
        request: &[u8],
    ) {
        let (call_id, expires_at) = (call.0.to_string(), call.1);
        let request = if request.len() <= REMEMBERED_REQUEST_BYTES {
            request.to_vec()
        } else {
            Vec::new()
        };
        let cost = ENTRY_OVERHEAD
            + idem_key.len()
            + fingerprint.len()
            + call_id.len()
            + body.len()
            + request.len();
        let mut entries = lock(&self.entries);
        entries.remove(idem_key);
        let body = body.to_vec();
        let known = Known::Settled {
            fingerprint,
            call_id,
            body,
            request,
            expires_at,
        };
        entries.insert(idem_key.into(), known, cost, self.budget);
    }

    /// Drop everything known about `idem_key`. Whatever deletes a call row
    /// (key retention, a purge) must call this after its delete commits, or
    /// a settled answer would outlive its row.
    pub fn forget(&self, idem_key: &str) {
        lock(&self.entries).remove(idem_key);
    }

    /// Bytes charged to the entries held now (never above the budget).
    pub fn bytes(&self) -> usize {
        lock(&self.entries).bytes
    }

    /// How many keys are held now.
    pub fn len(&self) -> usize {
        lock(&self.entries).by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Entries {
    /// Add an entry for a key that has none, evicting the oldest entries until
    /// it fits; one that could never fit is not kept.
    fn insert(&mut self, key: Arc<str>, known: Known, cost: usize, budget: usize) {
        if cost > budget {
            return;
        }
        while self.bytes + cost > budget && !self.order.is_empty() {
            self.evict_oldest();
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.insert(stamp, Arc::clone(&key));
        self.bytes += cost;
        let entry = Entry { known, stamp, cost };
        self.by_key.insert(key, entry);
    }

    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            if let Some(entry) = self.by_key.remove(&key) {
                self.bytes -= entry.cost;
            }
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.by_key.remove(key) {
            self.order.remove(&entry.stamp);
            self.bytes -= entry.cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "f1";
    /// The call behind every settled answer here: id `c`, never expiring.
    const CALL: (&str, Option<f64>) = ("c", None);
    /// The body of the request a settled answer was given to.
    const REQ: &[u8] = br#"{"tool":"charge","args":{"amount":1}}"#;

    fn settled_cost(key: &str, body_len: usize) -> usize {
        ENTRY_OVERHEAD + key.len() + FP.len() + CALL.0.len() + body_len
    }

    #[test]
    fn an_answer_past_its_calls_expiry_is_not_given() {
        let cache = KeyCache::default();
        cache.insert_settled("k", FP.into(), ("c", Some(now() - 1.0)), b"old", REQ);
        assert_eq!(cache.settled("k", FP), None);
        assert_eq!(cache.settled_for_request("k", REQ), None);
    }

    #[test]
    fn a_settled_answer_is_given_to_the_same_bytes_only() {
        let cache = KeyCache::default();
        cache.insert_settled("k", FP.into(), CALL, b"answer", REQ);
        let answer = Some(("c".to_string(), b"answer".to_vec()));
        assert_eq!(cache.settled_for_request("k", REQ), answer);
        let spaced = br#"{"tool": "charge", "args": {"amount": 1}}"#;
        assert_eq!(cache.settled_for_request("k", spaced), None);
        assert_eq!(cache.settled_for_request("k", b""), None);
        assert_eq!(cache.settled_for_request("other", REQ), None);
    }

    #[test]
    fn a_long_request_body_is_not_kept_but_its_answer_is() {
        let cache = KeyCache::default();
        let long = vec![b' '; REMEMBERED_REQUEST_BYTES + 1];
        cache.insert_settled("k", FP.into(), CALL, b"answer", &long);
        assert_eq!(cache.settled_for_request("k", &long), None);
        assert!(cache.settled("k", FP).is_some());
        assert_eq!(cache.bytes(), settled_cost("k", b"answer".len()));
    }

    #[test]
    fn a_settled_answer_is_given_only_for_its_fingerprint() {
        let cache = KeyCache::default();
        cache.insert_settled("k", FP.into(), CALL, b"answer", REQ);
        assert_eq!(
            cache.settled("k", FP),
            Some(("c".to_string(), b"answer".to_vec()))
        );
        assert_eq!(cache.settled("k", "other"), None);
        assert!(cache.has_row("k"));
        assert!(!cache.has_row("unknown"));
    }

    #[test]
    fn the_oldest_entries_are_evicted_to_stay_within_the_budget() {
        let body = vec![b'x'; 1000];
        let cache = KeyCache::with_budget(3 * settled_cost("k0", body.len()));
        for n in 0..10 {
            cache.insert_settled(&format!("k{n}"), FP.into(), CALL, &body, b"");
            assert!(cache.bytes() <= 3 * settled_cost("k0", body.len()));
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.settled("k6", FP), None, "evicted, oldest first");
        for kept in ["k7", "k8", "k9"] {
            assert!(cache.settled(kept, FP).is_some(), "{kept}");
        }
    }

    #[test]
    fn a_key_is_charged_once_when_its_call_settles() {
        let cache = KeyCache::default();
        cache.insert_has_row("k");
        cache.insert_has_row("k");
        assert_eq!(cache.bytes(), ENTRY_OVERHEAD + 1);
        cache.insert_settled("k", FP.into(), CALL, b"abc", b"");
        assert_eq!((cache.len(), cache.bytes()), (1, settled_cost("k", 3)));
    }

    #[test]
    fn forget_drops_the_answer_and_its_bytes() {
        let cache = KeyCache::default();
        cache.insert_settled("k", FP.into(), CALL, b"abc", b"");
        cache.insert_has_row("other");
        cache.forget("k");
        assert_eq!(cache.settled("k", FP), None);
        assert!(!cache.has_row("k"));
        assert_eq!(cache.bytes(), ENTRY_OVERHEAD + "other".len());
        cache.forget("never-seen");
    }

    #[test]
    fn an_answer_larger_than_the_budget_is_not_kept() {
        let cache = KeyCache::with_budget(ENTRY_OVERHEAD + 100);
        cache.insert_has_row("small");
        cache.insert_settled("big", FP.into(), CALL, &[0; 200], b"");
        assert_eq!(cache.settled("big", FP), None);
        assert!(cache.has_row("small"), "nothing evicted for it either");
        let off = KeyCache::with_budget(0);
        off.insert_has_row("k");
        assert!(off.is_empty());
    }
}
