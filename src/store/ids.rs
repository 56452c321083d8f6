//! Identifiers and time: call ids, effect ids, and the wall clock that leases
//! are compared against. Pure functions; nothing here touches the database.

use std::cell::RefCell;
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

/// The effect id of a call created before effect ids had a random part
/// (its row stores none): `eff_` + the call id's 16 hex. Such a call keeps
/// this id for every attempt, as it always had; a new call gets
/// `new_effect_id`'s.
pub fn effect_id_for(call_id: &str) -> String {
    format!("eff_{}", call_id.trim_start_matches("c_"))
}

/// The effect id a call's row stores, or for a row that stores none (made
/// before effect ids had a random part) the one it always had.
pub(super) fn stored_effect_id(stored: Option<String>, call_id: &str) -> String {
    stored.unwrap_or_else(|| effect_id_for(call_id))
}

/// The call whose effect id this is (`c_` + its 16 hex), for either format:
/// `eff_<16 hex>` (a call created before effect ids had a random part) or
/// `eff_<16 hex>_<32 hex>`. `None` for anything else. The call id comes
/// first in both, so a call is found from its effect id by primary key.
pub fn call_id_of_effect(effect_id: &str) -> Option<String> {
    let rest = effect_id.strip_prefix("eff_")?;
    let (call_hex, random) = match rest.split_once('_') {
        Some((call_hex, random)) => (call_hex, Some(random)),
        None => (rest, None),
    };
    let is_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_hex(call_hex, 16) || random.is_some_and(|r| !is_hex(r, 32)) {
        return None;
    }
    Some(format!("c_{call_hex}"))
}

/// A new call's effect id: `eff_` + the call id's 16 hex + `_` + 32 hex of
/// 128 bits from the operating system's random source. Stored with the call
/// when it is created, so every attempt sends the same one. The random part
/// is what keeps two deployments apart: their call ids (time and a
/// per-process counter) can coincide, and a downstream both of them call
/// must never take one's call for a replay of the other's. The call id
/// first keeps `effects`' primary-key index growing at its edge, as before.
/// Hex digits of a call id's milliseconds, the first part after `c_`.
pub(super) const MILLIS_HEX: usize = 11;

pub(super) fn new_effect_id(call_id: &str) -> String {
    let random = random_128();
    let call_hex = call_id.trim_start_matches("c_");
    let mut id = String::with_capacity(4 + call_hex.len() + 1 + 32);
    id.push_str("eff_");
    id.push_str(call_hex);
    id.push('_');
    for byte in random {
        id.push(HEX[usize::from(byte >> 4)] as char);
        id.push(HEX[usize::from(byte & 0x0f)] as char);
    }
    id
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Bytes of the OS's random source each thread draws at once: 256 effect
/// ids per `getrandom` call instead of one (a system call cost a new key
/// about a microsecond on this VM).
const RANDOM_POOL: usize = 4096;

thread_local! {
    /// This thread's unused OS random bytes and how many are used. Bytes
    /// are handed out once, in order, and never derived or reused: each id
    /// still gets 128 bits straight from the OS.
    static POOL: RefCell<([u8; RANDOM_POOL], usize)> = const { RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
}

/// 16 bytes from the operating system's random source, through this
/// thread's pool.
fn random_128() -> [u8; 16] {
    POOL.with_borrow_mut(|(bytes, used)| {
        if *used + 16 > RANDOM_POOL {
            // The OS source does not fail on Linux once booted; if it ever
            // did, a call must not get a guessable key, so this is a
            // bug-level stop.
            getrandom::fill(bytes).expect("the operating system's random source");
            *used = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&bytes[*used..*used + 16]);
        // Handed out once: the pool keeps no copy a later id could repeat.
        bytes[*used..*used + 16].fill(0);
        *used += 16;
        out
    })
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

/// A bulk job's id: `b_` + 16 hex drawn as a call id's are (time first,
/// so jobs sort by creation).
pub(super) fn new_job_id() -> String {
    format!("b_{}", &new_call_id()[2..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The same call id drawn by two deployments (it is time and a counter,
    /// so it can be) still gets two different effect ids; each is the call
    /// id's hex, then 32 hex of randomness.
    #[test]
    fn one_call_id_in_two_deployments_gets_two_effect_ids() {
        let call_id = new_call_id();
        let hex = call_id.trim_start_matches("c_");
        let ids: HashSet<String> = (0..1000).map(|_| new_effect_id(&call_id)).collect();
        assert_eq!(ids.len(), 1000, "no two draws alike");
        for id in &ids {
            let random = id
                .strip_prefix(&format!("eff_{hex}_"))
                .unwrap_or_else(|| panic!("{id} starts with the call id"));
            assert_eq!(random.len(), 32, "{id}");
            assert!(random.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
    }

    /// Both formats give their call back; anything else gives none.
    #[test]
    fn the_call_is_found_from_either_format_of_effect_id() {
        let call_id = new_call_id();
        assert_eq!(
            call_id_of_effect(&new_effect_id(&call_id)),
            Some(call_id.clone())
        );
        assert_eq!(
            call_id_of_effect(&effect_id_for(&call_id)),
            Some(call_id.clone())
        );
        for bad in [
            "",
            "eff_",
            "eff_xyz",
            "eff_1a2b3c4d5e6f7a8",
            "eff_1a2b3c4d5e6f7a8b_",
            "eff_1a2b3c4d5e6f7a8b_00",
            "eff_1a2b3c4d5e6f7a8b_0123456789abcdef0123456789abcdeg",
            "c_1a2b3c4d5e6f7a8b",
        ] {
            assert_eq!(call_id_of_effect(bad), None, "{bad:?}");
        }
    }
}
