//! Request ids: the `X-Request-Id` a response echoes and every log line of the
//! request carries.
//!
//! A client's id is kept when it is 1–128 visible ASCII characters, so a
//! caller can follow its own id through our logs; anything else is replaced
//! by one made here. A made id is a per-process prefix (from the pid and the
//! start time) and a counter: unique within the process without a lock, and
//! across processes and restarts with overwhelming likelihood.
//!
//! This module never echoes an id it refused: an invalid header value could
//! carry anything, including a secret or a forged log field.

use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The request and response header.
pub const HEADER: &str = "X-Request-Id";

/// The longest id a client may send.
pub const MAX_LEN: usize = 128;

/// Whether a client-sent id is acceptable: 1–128 bytes of `!` to `~`.
pub fn is_valid(id: &str) -> bool {
    let visible = |b: u8| (0x21..=0x7e).contains(&b);
    !id.is_empty() && id.len() <= MAX_LEN && id.bytes().all(visible)
}

/// Makes ids for requests that did not bring a valid one.
pub struct RequestIds {
    /// 12 hex digits, different for each process.
    prefix: String,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        RequestIds::new()
    }
}

impl RequestIds {
    pub fn new() -> RequestIds {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let seed = format!("{}:{nanos}", std::process::id());
        RequestIds::with_seed(&seed)
    }

    fn with_seed(seed: &str) -> RequestIds {
        let digest = Sha256::digest(seed.as_bytes());
        let prefix = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        RequestIds {
            prefix,
            next: AtomicU64::new(1),
        }
    }

    /// A new id, e.g. `r3f9a1c2e7b10-42`.
    pub fn generate(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("r{}-{n}", self.prefix)
    }

    /// The id of a request: the client's `X-Request-Id` if it is valid,
    /// otherwise a new one.
    pub fn accept_or_generate(&self, client: Option<&str>) -> String {
        match client {
            Some(id) if is_valid(id) => id.to_string(),
            _ => self.generate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::thread;

    #[test]
    fn a_valid_client_id_is_kept() {
        let ids = RequestIds::new();
        let longest = "a".repeat(MAX_LEN);
        for id in [
            "1",
            "abc-DEF_123",
            "~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}",
            &longest,
        ] {
            assert_eq!(ids.accept_or_generate(Some(id)), id);
        }
    }

    #[test]
    fn an_invalid_client_id_is_replaced_not_echoed() {
        let ids = RequestIds::new();
        let too_long = "a".repeat(MAX_LEN + 1);
        for id in [
            "",
            " ",
            "has space",
            "tab\t",
            "new\nline",
            "é",
            "\u{7f}",
            &too_long,
        ] {
            let got = ids.accept_or_generate(Some(id));
            assert_ne!(got, id);
            assert!(is_valid(&got), "{got:?}");
        }
        assert!(is_valid(&ids.accept_or_generate(None)));
    }

    #[test]
    fn generated_ids_are_unique_across_threads() {
        let ids = RequestIds::new();
        let all: Vec<String> = thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..5_000).map(|_| ids.generate()).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let distinct: HashSet<&String> = all.iter().collect();
        assert_eq!(distinct.len(), 20_000);
        assert!(all.iter().all(|id| is_valid(id)));
    }

    #[test]
    fn processes_get_different_prefixes() {
        let a = RequestIds::with_seed("100:1700000000000000000").generate();
        let b = RequestIds::with_seed("101:1700000000000000000").generate();
        let c = RequestIds::with_seed("100:1700000000000000001").generate();
        assert!(a != b && a != c && b != c, "{a} {b} {c}");
        assert!(
            a.starts_with('r') && a.ends_with("-1") && a.len() == 15,
            "{a}"
        );
    }
}
