//! What a new gated call carries into the store (`Gate`: who may decide
//! it, how long its request stays open, whether its tenant's webhook is
//! told) — the part of approval gates a call's creation needs, so that the
//! model of a new call does not depend on the rules of deciding one
//! (`approval`).
//!
//! A leaf: it imports nothing of the store.

use std::time::Duration;

/// Who may decide a call's approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approvers {
    /// People whose token has the approver role of the call's tenant (or
    /// an admin).
    People,
    /// Those, or the MCP client that made the call, asked through an input
    /// request (the tool's policy and the tenant both allow it).
    PeopleOrClient,
}

impl Approvers {
    /// The word `approvals.approvers` stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Approvers::People => "people",
            Approvers::PeopleOrClient => "people_or_client",
        }
    }

    /// The approvers a stored word names; an unknown word admits only
    /// people (the narrower reading).
    pub fn parse(word: &str) -> Approvers {
        match word {
            "people_or_client" => Approvers::PeopleOrClient,
            _ => Approvers::People,
        }
    }
}

/// What a new gated call carries into the store: who may decide, how long
/// the request stays open, and whether its tenant's webhook is told.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    pub approvers: Approvers,
    pub timeout: Duration,
    /// Write a `notifications` row for the webhook thread to deliver.
    pub notify: bool,
}
