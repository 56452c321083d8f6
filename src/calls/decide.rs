//! A waiting call decided, as both transports would ask it: the store
//! decides (`store::approval`: one conditional update, single-use, bound
//! to the fingerprint, audited with who and why), then an approved call is
//! handed to this process's runner (another node's poll finds it too) and
//! a denied one's waits end. Also the reads of the approval queue and of a
//! call's request.
//!
//! It never checks a role — the transport does, before it asks — and never
//! decides anything itself; it never logs a reason (free text).

use super::service::Calls;
use crate::auth::Tenant;
use crate::store::{Approval, Decided, Decision, Source, StoreError, Verdict, Waiting};

/// The longest page of the approval queue.
pub const MAX_QUEUE_PAGE: usize = 500;

impl Calls {
    /// Decide the call `call_id` as `decision` says, within `scope` (a
    /// tenant; `None`, any tenant's: an admin). What the store found or did.
    pub fn decide(
        &self,
        scope: Option<&str>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError> {
        let decided = self.store.decide(scope, call_id, decision)?;
        if let Decided::Applied { call, .. } = &decided {
            let to = match decision.verdict {
                Verdict::Approve => {
                    // Rare, and its args are not parsed here: assume slow.
                    self.runner.submit(&call.call_id, &call.tool, false);
                    "pending"
                }
                Verdict::Deny => {
                    self.notifier.notify([call.call_id.as_str()]);
                    "denied"
                }
            };
            self.metrics
                .approvals
                .observe_decision(decision.verdict, decision.source);
            crate::log::info("approval decided")
                .event("approval_decided")
                .tenant(&call.tenant)
                .call_id(&call.call_id)
                .tool(&call.tool)
                .principal(&decision.by)
                .label("source", decision.source.as_str())
                .transition("awaiting_approval", to)
                .emit();
        }
        Ok(decided)
    }

    /// The call's request and its decision, within `scope`.
    pub fn approval(
        &self,
        scope: Option<&str>,
        call_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        self.store.approval(scope, call_id)
    }

    /// The approval queue within `scope`, oldest first, after `after`.
    pub fn waiting(
        &self,
        scope: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Waiting>, StoreError> {
        self.store.waiting(scope, after, limit.min(MAX_QUEUE_PAGE))
    }
}

/// A person's decision, by the token that made the request: recorded as
/// its principal, `name@tenant` for a person's named token, the tenant's
/// name for the tenant's own token.
pub fn by_person(
    decider: &Tenant,
    verdict: Verdict,
    reason: Option<String>,
    fingerprint: Option<String>,
) -> Decision {
    let by = match decider.principal == decider.name {
        true => decider.name.to_string(),
        false => format!("{}@{}", decider.principal, decider.name),
    };
    Decision {
        verdict,
        source: Source::Person,
        by,
        reason,
        fingerprint,
    }
}
