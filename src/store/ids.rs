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

/// The call an effect id belongs to: `eff_` + the call id's 16 hex, then
/// (issue 35's form) `_` + 32 random hex, or nothing (the form every call
/// had before). `None` for anything else. The caller must still compare the
/// whole effect id with the call's own (`effect_id` as stored, or
/// `effect_id_for` when none is): the call id alone does not make it this
/// call's effect id.
pub fn call_id_of_effect(effect_id: &str) -> Option<String> {
    let rest = effect_id.strip_prefix("eff_")?;
    let is_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let (call_hex, tail) = rest.split_at_checked(CALL_ID_HEX)?;
    let tail_ok = tail.is_empty()
        || tail
            .strip_prefix('_')
            .is_some_and(|random| random.len() == 32 && is_hex(random));
    (is_hex(call_hex) && tail_ok).then(|| format!("c_{call_hex}"))
}

/// Hex digits of a call id after `c_`, and of them the milliseconds'.
pub(super) const CALL_ID_HEX: usize = 16;
pub(super) const MILLIS_HEX: usize = 11;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Both effect id forms name their call; nothing else names one.
    #[test]
    fn an_effect_id_names_its_call() {
        let call_id = "c_0190f3a2b4c5d6e7";
        assert_eq!(
            call_id_of_effect(&effect_id_for(call_id)).as_deref(),
            Some(call_id)
        );
        let new_form = format!("eff_0190f3a2b4c5d6e7_{}", "a".repeat(32));
        assert_eq!(call_id_of_effect(&new_form).as_deref(), Some(call_id));
        for bad in [
            "",
            "eff_",
            "eff_0190f3a2b4c5d6e",
            "eff_0190F3A2B4C5D6E7",
            "eff_0190f3a2b4c5d6e7_",
            "eff_0190f3a2b4c5d6e7x",
            "c_0190f3a2b4c5d6e7",
            "eff_0190f3a2b4c5d6é7",
        ] {
            assert_eq!(call_id_of_effect(bad), None, "{bad:?}");
        }
        assert_eq!(
            call_id_of_effect(&format!("eff_0190f3a2b4c5d6e7_{}", "g".repeat(32))),
            None
        );
        assert!(new_call_id().len() == 2 + CALL_ID_HEX);
    }
}
