//! Identifiers and time: call ids, effect ids, and the wall clock that leases
//! are compared against. Pure functions; nothing here touches the database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock seconds: leases are compared across processes and restarts.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `eff_` + the call id's 16 hex: derived from the call alone, so every attempt
/// of a call hands the same downstream idempotency key to its tool. Like the
/// call id it grows with time, so `effects`' primary-key index is written at
/// its edge rather than at a random page per effect.
pub fn effect_id_for(call_id: &str) -> String {
    format!("eff_{}", call_id.trim_start_matches("c_"))
}

/// `c_` + 16 hex: 11 hex of milliseconds since the epoch, then 5 hex of a
/// per-process counter that starts at an offset hashed from the process id and
/// start time. Time first keeps new ids increasing, so the primary-key index
/// grows at its right edge instead of dirtying a random page per insert — and
/// every dirty page is written at commit. Ids are unique within a process; two
/// processes can still collide, and `insert_call` then draws another.
pub(super) fn new_call_id() -> String {
    static OFFSET: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let offset = *OFFSET.get_or_init(|| {
        let seed = format!("{}:{:?}", std::process::id(), SystemTime::now());
        u64::from_str_radix(&crate::fingerprint::hex_sha256(seed.as_bytes())[..5], 16).unwrap_or(0)
    });
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let low = (offset + COUNTER.fetch_add(1, Ordering::Relaxed)) & 0xF_FFFF;
    format!("c_{:011x}{low:05x}", millis & 0xFFF_FFFF_FFFF)
}
