//! Arbitrary bytes that happen to be JSON into the canonical form used for
//! request fingerprints: it must never panic, overflow the stack or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = idempotent_tool::fingerprint::canonical(&value);
    }
});
