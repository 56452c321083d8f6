//! Approval gates, as both backends keep them: what a gated call carries
//! into the store (`Gate`), a decision asked of it (`Decision`), the
//! request and its decision as stored (`Approval`), what a decision found
//! or did (`Decided`), and the rules each wing's `approval.rs` implements
//! in its own SQL.
//!
//! The rules. A gated call is inserted `awaiting_approval` — attempt 0, no
//! lease, no owner — with its `approvals` row (who may decide, when the
//! request expires, the fingerprint it binds) and an `approval_requested`
//! audit row, in its create's own transaction; when its tenant has a
//! webhook, a `notifications` row too (the outbox the webhook thread
//! delivers from). No claim ever takes it: every claim needs `pending`.
//! A decision is ONE conditional update — `awaiting_approval` → `pending`
//! (approved) or → `denied` — `WHERE call_id = … AND status =
//! 'awaiting_approval' AND fingerprint = …`, its row count deciding, with
//! the `approvals` row's decision and the `approved` / `denied` audit row
//! (who, by which source, why) in the same transaction. So a decision is
//! single-use: a second finds the first and changes nothing. A source
//! `client` (an MCP client's answer to an input request) applies only to a
//! request whose approvers include the client. Expiry is a decision too,
//! by `expiry`, fenced the same way; so is a cancel of a waiting call,
//! which ends it `cancelled` and closes its request (`cancelled`).
//!
//! A `denied` call never ran and has no effect row; its key replays it and
//! its business key no longer holds (like `failed`). This file holds no SQL
//! and decides nothing; the wings' updates do.

use super::model::Call;
use serde_json::{json, Value};
use std::time::Duration;

/// The longest reason a decision may give, in bytes.
pub const MAX_DECISION_REASON_BYTES: usize = 500;

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

/// What a decision asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    Deny,
}

/// Where a decision came from: the `approvals.source` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A person's token with the approver role (or an admin's).
    Person,
    /// The MCP client that made the call, answering an input request; only
    /// where the request's approvers include the client.
    Client,
    /// No decision came before the request expired (maintenance).
    Expiry,
    /// The waiting call was cancelled (its tenant's cancel).
    Cancel,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Person => "person",
            Source::Client => "client",
            Source::Expiry => "expiry",
            Source::Cancel => "cancel",
        }
    }

    fn parse(word: &str) -> Option<Source> {
        [
            Source::Person,
            Source::Client,
            Source::Expiry,
            Source::Cancel,
        ]
        .into_iter()
        .find(|s| s.as_str() == word)
    }
}

/// One decision asked of the store: approve or deny a call, by whom, from
/// which source, why, and the fingerprint of the request the decider
/// reviewed (`None`: the call's own, as shown with its request).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    pub source: Source,
    /// The principal (a person's token name, or the tenant's).
    pub by: String,
    pub reason: Option<String>,
    pub fingerprint: Option<String>,
}

impl Decision {
    /// An expired request's decision: denied, by `expiry`.
    pub(in crate::store) fn expiry() -> Decision {
        Decision {
            verdict: Verdict::Deny,
            source: Source::Expiry,
            by: Source::Expiry.as_str().to_string(),
            reason: None,
            fingerprint: None,
        }
    }
}

/// How a request was decided, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruling {
    /// `approved`, `denied` or `cancelled`.
    pub decision: String,
    pub source: Option<Source>,
    pub by: Option<String>,
    pub reason: Option<String>,
    pub at: f64,
}

/// A call's approval request and its decision, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub call_id: String,
    pub tenant: String,
    pub tool: String,
    /// The fingerprint of the request waiting: the decision binds it.
    pub fingerprint: String,
    pub approvers: Approvers,
    pub requested_at: f64,
    pub expires_at: f64,
    /// `None` while the request is open.
    pub outcome: Option<Ruling>,
}

impl Approval {
    /// Read back what a wing's row holds, in `APPROVAL_COLUMNS` order.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::store) fn from_columns(
        (call_id, tenant, tool, fingerprint): (String, String, String, String),
        approvers: String,
        (requested_at, expires_at): (f64, f64),
        decision: Option<String>,
        source: Option<String>,
        by: Option<String>,
        reason: Option<String>,
        decided_at: Option<f64>,
    ) -> Approval {
        let outcome = decision.map(|decision| Ruling {
            decision,
            source: source.as_deref().and_then(Source::parse),
            by,
            reason,
            at: decided_at.unwrap_or(requested_at),
        });
        Approval {
            call_id,
            tenant,
            tool,
            fingerprint,
            approvers: Approvers::parse(&approvers),
            requested_at,
            expires_at,
            outcome,
        }
    }

    /// The JSON the API returns.
    pub fn to_json(&self) -> Value {
        let decision = self.outcome.as_ref().map(|o| {
            json!({
                "decision": o.decision,
                "source": o.source.map(Source::as_str),
                "by": o.by,
                "reason": o.reason,
                "at": o.at,
            })
        });
        json!({
            "call_id": self.call_id,
            "tenant": self.tenant,
            "tool": self.tool,
            "fingerprint": self.fingerprint,
            "approvers": self.approvers.as_str(),
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
            "decision": decision,
        })
    }
}

/// A call waiting for a decision, with its request: a row of the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub call: Call,
    pub approval: Approval,
}

/// What a decision found or did, with the call as it then is.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// No such call (in the asker's scope).
    NotFound,
    /// The call never waited for a decision (its tool had no policy, or
    /// none held for its arguments).
    NoRequest(Call),
    /// This decision applied: approved (the call is `pending`) or denied.
    Applied { call: Call, approval: Approval },
    /// The request had been decided before (approved, denied, expired or
    /// cancelled): nothing changed; `approval` says how.
    AlreadyDecided { call: Call, approval: Approval },
    /// The decider reviewed another request than the one waiting.
    FingerprintMismatch { call: Call, approval: Approval },
    /// A client's decision of a request only people may decide.
    ClientNotAllowed { call: Call, approval: Approval },
}

impl Decided {
    /// The same outcome with `f` applied to its call (the facade stamps
    /// `expires_at` this way).
    pub(in crate::store) fn map(self, f: impl FnOnce(Call) -> Call) -> Decided {
        match self {
            Decided::NotFound => Decided::NotFound,
            Decided::NoRequest(call) => Decided::NoRequest(f(call)),
            Decided::Applied { call, approval } => Decided::Applied {
                call: f(call),
                approval,
            },
            Decided::AlreadyDecided { call, approval } => Decided::AlreadyDecided {
                call: f(call),
                approval,
            },
            Decided::FingerprintMismatch { call, approval } => Decided::FingerprintMismatch {
                call: f(call),
                approval,
            },
            Decided::ClientNotAllowed { call, approval } => Decided::ClientNotAllowed {
                call: f(call),
                approval,
            },
        }
    }

    /// Why a decision that did not apply changed nothing, from the call and
    /// its request as read after the conditional update matched no row.
    pub(in crate::store) fn explain(
        call: Call,
        approval: Option<Approval>,
        decision: &Decision,
    ) -> Decided {
        let Some(approval) = approval else {
            return Decided::NoRequest(call);
        };
        if approval.outcome.is_some() {
            return Decided::AlreadyDecided { call, approval };
        }
        if decision.source == Source::Client && approval.approvers != Approvers::PeopleOrClient {
            return Decided::ClientNotAllowed { call, approval };
        }
        if decision
            .fingerprint
            .as_ref()
            .is_some_and(|fp| *fp != approval.fingerprint)
        {
            return Decided::FingerprintMismatch { call, approval };
        }
        // Open, allowed and matching, yet the call is no longer waiting: a
        // row `verify` reports (`approval_agrees`); nothing is decided.
        Decided::NoRequest(call)
    }
}

/// The word `approvals.decision` and the call's status take for a verdict.
impl Verdict {
    pub fn decision(self) -> &'static str {
        match self {
            Verdict::Approve => "approved",
            Verdict::Deny => "denied",
        }
    }
}

/// The `error_json` of a call a decision denied: `approval_denied` with the
/// reason (or a fixed text), or `approval_expired`.
pub(in crate::store) fn denied_error(source: Source, reason: Option<&str>) -> String {
    let (code, message) = match source {
        Source::Expiry => (
            "approval_expired",
            "no decision came before the approval request expired",
        ),
        _ => ("approval_denied", reason.unwrap_or("denied by an approver")),
    };
    json!({"code": code, "message": message, "retryable": false}).to_string()
}

/// The audit detail of a decision: who, from which source, and why.
pub(in crate::store) fn decided_detail(decision: &Decision) -> String {
    if decision.source == Source::Expiry {
        return "no decision before the request expired (expiry)".to_string();
    }
    let reason = decision
        .reason
        .as_ref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("by {} ({}){reason}", decision.by, decision.source.as_str())
}

/// A notification of the outbox, claimed for one delivery attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The Standard Webhooks message id: the same on every attempt.
    pub msg_id: String,
    pub tenant: String,
    /// What happened (`approval.requested`).
    pub event: String,
    /// Attempts so far, this one included.
    pub attempts: i64,
    pub created_at: f64,
    pub call: Call,
    pub approval: Approval,
}

/// What became of one delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delivery {
    /// Delivered (a 2xx): the row goes.
    Delivered,
    /// Failed; try again after this long.
    RetryIn(Duration),
    /// Failed for the last time (its bound reached): the row goes.
    GaveUp,
}

/// The event a `notifications` row of a new approval request names.
pub const APPROVAL_REQUESTED: &str = "approval.requested";

/// The message id of `call_id`'s approval request notification.
pub(in crate::store) fn request_msg_id(call_id: &str) -> String {
    format!("msg_{}_requested", call_id.trim_start_matches("c_"))
}
