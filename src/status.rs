//! The call statuses, declared once: the table in `call_statuses!` below
//! generates the `Status` enum, the list of every status (`Status::ALL`),
//! their spellings, which are terminal, which let go of a business key,
//! which an operator's re-run may bring back, and
//! a `parse` that refuses a word it does not know. Everything else that
//! names statuses — the metrics, the list's filter, MCP's output schema —
//! takes them from here; what cannot (the console's JavaScript,
//! `openapi.yaml`, each SQL `IN (…)` list of both wings) is held to this
//! table by `tests/it/status_table.rs`, so a new status that misses one
//! place fails a test. The store re-exports it (`store::Status`); being a
//! leaf, it lets every module name a status without importing the store.
//!
//! It decides no transition: the store's conditional statements do. It must
//! never default an unknown word to some status: a row whose status this
//! release does not know is an error, said as one.

use std::fmt;

/// Declares the statuses: for each, its doc, its variant, its word, whether
/// it is terminal (never executed again), whether it lets go of its
/// business key (a new intent with the same business key may then be made)
/// and whether an operator's re-run may bring it back to `pending`.
macro_rules! call_statuses {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $word:literal, terminal: $terminal:literal, releases_business_key: $releases:literal, rerun: $rerun:literal;
    )+) => {
        /// Where a call is in its life.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Status {
            $($(#[$doc])* $variant,)+
        }

        impl Status {
            /// Every status, in the order a call moves through them.
            pub const ALL: &'static [Status] = &[$(Status::$variant),+];

            /// The word the database, the API and the logs use.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Status::$variant => $word,)+
                }
            }

            /// The status a word names; an unknown word is an error, never
            /// a guess.
            pub fn parse(word: &str) -> Result<Status, UnknownStatus> {
                match word {
                    $($word => Ok(Status::$variant),)+
                    _ => Err(UnknownStatus(word.chars().take(64).collect())),
                }
            }

            /// Never executed again (a retryable failure is first reset to
            /// `pending` by its client's same-key retry).
            pub fn is_terminal(self) -> bool {
                match self {
                    $(Status::$variant => $terminal,)+
                }
            }

            /// A call in this status no longer holds its business key: the
            /// intent it stood for ended without an effect.
            pub fn releases_business_key(self) -> bool {
                match self {
                    $(Status::$variant => $releases,)+
                }
            }

            /// An operator's re-run may send a call in this status back to
            /// `pending` (`store::rerun`): it ended without an effect, and no
            /// person refused it.
            pub fn may_rerun(self) -> bool {
                match self {
                    $(Status::$variant => $rerun,)+
                }
            }
        }
    };
}

call_statuses! {
    /// Accepted and on disk, waiting for a person's decision: its tool's
    /// approval policy held for its arguments. It holds no lease and no
    /// worker's slot, and holds its business key; approved, it becomes
    /// `pending` and runs as any call.
    AwaitingApproval = "awaiting_approval", terminal: false, releases_business_key: false, rerun: false;
    /// Accepted and on disk, waiting for a worker (or for its retry's time).
    Pending = "pending", terminal: false, releases_business_key: false, rerun: false;
    /// Claimed: a worker holds its lease and runs its tool.
    Running = "running", terminal: false, releases_business_key: false, rerun: false;
    /// Its tool answered; its effect, if any, is recorded with it.
    Succeeded = "succeeded", terminal: true, releases_business_key: false, rerun: false;
    /// Its tool failed (`error.retryable` says whether a same-key retry may
    /// run it again).
    Failed = "failed", terminal: true, releases_business_key: true, rerun: true;
    /// Stopped at its tenant's request before any effect was recorded: a
    /// pending call that never ran, or a running one whose tool was stopped
    /// (or ended without an effect) after the cancel was asked.
    Cancelled = "cancelled", terminal: true, releases_business_key: true, rerun: true;
    /// Its approval was refused by a person, or no decision came before
    /// its request expired: it never ran and has no effect.
    Denied = "denied", terminal: true, releases_business_key: true, rerun: false;
}

impl Status {
    /// Every word, in `ALL`'s order.
    pub fn words() -> impl Iterator<Item = &'static str> {
        Status::ALL.iter().map(|s| s.as_str())
    }

    /// The terminal statuses' words.
    pub fn terminal_words() -> impl Iterator<Item = &'static str> {
        Status::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status word this release does not know (clipped to 64 characters): a
/// row written by a newer release, or a damaged one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown call status {:?} (this release knows {})",
            self.0,
            Status::words().collect::<Vec<_>>().join(", ")
        )
    }
}

impl std::error::Error for UnknownStatus {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_to_its_status() {
        for &status in Status::ALL {
            assert_eq!(Status::parse(status.as_str()), Ok(status));
        }
    }

    #[test]
    fn an_unknown_word_is_refused_not_guessed() {
        for word in ["", "Failed", "done", "pending ", "succeeded\0"] {
            let err = Status::parse(word).unwrap_err();
            assert!(err.to_string().contains("unknown call status"), "{err}");
        }
    }

    #[test]
    fn words_are_distinct_lowercase_identifiers() {
        let mut seen = std::collections::HashSet::new();
        for word in Status::words() {
            assert!(seen.insert(word), "{word} twice");
            assert!(word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn a_rerun_brings_back_only_calls_that_ended_without_an_effect_or_a_refusal() {
        let rerun: Vec<&str> = Status::ALL
            .iter()
            .filter(|s| s.may_rerun())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(rerun, ["failed", "cancelled"]);
    }

    #[test]
    fn only_terminal_statuses_release_a_business_key() {
        for &status in Status::ALL {
            if status.releases_business_key() {
                assert!(status.is_terminal(), "{status}");
            }
        }
    }
}
