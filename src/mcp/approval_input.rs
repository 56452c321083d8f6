//! A call awaiting approval, put to the MCP client that made it through the
//! 2026-07-28 input requests (SEP-2322), where — and only where — its
//! answer may count as the decision: the call's stored request admits the
//! client (the tool's policy said `mcp_client` and the tenant allowed
//! `mcp_client_may_approve` when the call was made), the policy and the
//! tenant still allow it now, and the request declares the client's
//! `elicitation` capability.
//!
//! It is asked as one `elicitation/create` under the key `approval`: a
//! confirmation (no fields) whose message shows the tool and its arguments.
//! `accept` approves, `decline` denies, `cancel` decides nothing (it is asked
//! again). Without tasks the `tools/call` answers an `input_required` result
//! whose `requestState` names the call (`approval:<call_id>:<fingerprint>`);
//! re-sent with the answer (and that state, or the same key), the decision is
//! recorded and the call runs and is answered as any call. With tasks the
//! task shows `input_required` with the same request, and `tasks/update`
//! carries the answer.
//!
//! A decision goes through `Calls::decide` with `Source::Client`, bound to
//! the call's fingerprint: single-use, audited (`approved`/`denied`, source
//! `client`), and refused by the store itself when the stored request is
//! for people only. This module never decides anything where the client may
//! not, never reads a request's state as trusted (it only has to match the
//! call it names), and never logs arguments.

use super::endpoint::Mcp;
use super::jsonrpc::INVALID_PARAMS;
use super::tasks::declared;
use super::tools_call::{store_failure, RpcError};
use crate::auth::Tenant;
use crate::store::{Approvers, Call, Decided, Decision, Source, Status, Verdict};
use serde_json::{json, Map, Value};

/// The key of the one input request that asks for the decision.
pub const APPROVAL_INPUT: &str = "approval";
/// The most bytes of a call's arguments shown in the request's message.
const MAX_SHOWN_ARGS: usize = 2_000;
/// The prefix of a `requestState` this server mints.
const STATE_PREFIX: &str = "approval:";

/// Who asks about a call: its tenant (with the token's principal), and
/// whether its client takes elicitation requests (declared in the
/// request's `_meta`, 2026-07-28).
#[derive(Debug, Clone)]
pub struct Asker {
    pub tenant: Tenant,
    pub elicits: bool,
}

impl Asker {
    pub fn of(tenant: &Tenant, params: &Map<String, Value>) -> Asker {
        Asker {
            tenant: tenant.clone(),
            elicits: declared(params)
                .and_then(|c| c.get("elicitation"))
                .is_some(),
        }
    }
}

/// The client's answer to the approval request in `params.inputResponses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No answer to this request (none sent, or only to other keys).
    None,
    /// `accept`: approve.
    Accept,
    /// `decline`: deny.
    Decline,
    /// `cancel`: the client dismissed it; nothing is decided.
    Dismissed,
}

impl Answer {
    /// Read `params.inputResponses` (an object when present; other keys are
    /// ignored); a malformed answer is `-32602`.
    pub fn of(params: &Map<String, Value>) -> Result<Answer, RpcError> {
        let invalid = |message: &str| (INVALID_PARAMS, message.to_string(), None);
        let responses = match params.get("inputResponses") {
            None => return Ok(Answer::None),
            Some(Value::Object(responses)) => responses,
            Some(_) => return Err(invalid("params.inputResponses must be an object")),
        };
        let Some(response) = responses.get(APPROVAL_INPUT) else {
            return Ok(Answer::None);
        };
        match response.get("action").and_then(Value::as_str) {
            Some("accept") => Ok(Answer::Accept),
            Some("decline") => Ok(Answer::Decline),
            Some("cancel") => Ok(Answer::Dismissed),
            _ => Err(invalid(
                "inputResponses.approval must be an elicitation result: \
                 {\"action\": \"accept\" | \"decline\" | \"cancel\"}",
            )),
        }
    }

    fn verdict(self) -> Option<Verdict> {
        match self {
            Answer::Accept => Some(Verdict::Approve),
            Answer::Decline => Some(Verdict::Deny),
            Answer::None | Answer::Dismissed => None,
        }
    }
}

/// Whether the client of `tenant` may decide `call`'s approval now: the
/// call waits, its stored request admits the client, and the tool's policy
/// and the tenant still allow it (a policy or tenant changed since narrows
/// it at once).
pub fn client_may_decide(mcp: &Mcp, tenant: &Tenant, call: &Call) -> Result<bool, RpcError> {
    if call.status != Status::AwaitingApproval || !tenant.client_may_approve {
        return Ok(false);
    }
    let policy_allows = mcp
        .calls
        .tools()
        .get(&call.tool)
        .and_then(|spec| spec.approval.as_ref())
        .is_some_and(|policy| policy.mcp_client);
    if !policy_allows {
        return Ok(false);
    }
    let approval = mcp
        .calls
        .approval(Some(&call.tenant), &call.call_id)
        .map_err(store_failure)?;
    Ok(approval.is_some_and(|a| a.outcome.is_none() && a.approvers == Approvers::PeopleOrClient))
}

/// The input requests that put `call`'s approval to its client, if this
/// asker may be asked (`None`: a person decides, or the client takes no
/// elicitation).
pub fn input_requests(mcp: &Mcp, asker: &Asker, call: &Call) -> Result<Option<Value>, RpcError> {
    if !asker.elicits || !client_may_decide(mcp, &asker.tenant, call)? {
        return Ok(None);
    }
    let mut args = call.args_json.clone();
    if args.len() > MAX_SHOWN_ARGS {
        let mut cut = MAX_SHOWN_ARGS;
        while !args.is_char_boundary(cut) {
            cut -= 1;
        }
        args.truncate(cut);
        args.push('…');
    }
    let message = format!(
        "Approve this call? Tool {} with arguments {args}. Accept runs it once; decline \
         denies it (it never runs).",
        call.tool
    );
    Ok(Some(json!({APPROVAL_INPUT: {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {}},
        },
    }})))
}

/// `tools/call`'s `input_required` result for `call`.
pub fn input_required(call: &Call, requests: Value) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": request_state(call),
    })
}

/// The state an `input_required` result carries: the call it asks about.
fn request_state(call: &Call) -> String {
    format!("{STATE_PREFIX}{}:{}", call.call_id, call.fingerprint)
}

/// The call a re-sent `tools/call`'s `requestState` names (`None` when it
/// sends none). A state this server did not mint for one of the tenant's
/// waiting-or-decided calls of this tool is `-32602`: nothing is created or
/// decided for it.
pub fn stated_call(
    mcp: &Mcp,
    tenant: &Tenant,
    tool: &str,
    params: &Map<String, Value>,
) -> Result<Option<Call>, RpcError> {
    let Some(state) = params.get("requestState") else {
        return Ok(None);
    };
    let refused = || {
        (
            INVALID_PARAMS,
            "requestState is not one this server gave for this tool's call".to_string(),
            None,
        )
    };
    let call_id = state
        .as_str()
        .and_then(|s| s.strip_prefix(STATE_PREFIX))
        .and_then(|s| s.split_once(':'))
        .map(|(id, _)| id)
        .ok_or_else(refused)?;
    let call = mcp
        .calls
        .get(&tenant.name, call_id)
        .map_err(store_failure)?
        .filter(|call| call.tool == tool && state.as_str() == Some(&request_state(call)))
        .ok_or_else(refused)?;
    Ok(Some(call))
}

/// Record the client's answer to `call`'s request, if it gave one that
/// decides: the call as it then is. An answer where the client may not
/// decide is refused (`-32602`), never taken as a person's approval.
pub fn apply(mcp: &Mcp, tenant: &Tenant, call: Call, answer: Answer) -> Result<Call, RpcError> {
    let Some(verdict) = answer.verdict() else {
        return Ok(call);
    };
    if call.status != Status::AwaitingApproval {
        // Decided already (this answer re-sent, or a person was first):
        // the call says how.
        return Ok(call);
    }
    if !client_may_decide(mcp, tenant, &call)? {
        return Err(not_the_clients(&call));
    }
    let decision = Decision {
        verdict,
        source: Source::Client,
        by: format!("mcp client of {}", principal(tenant)),
        reason: Some("answered the MCP input request".into()),
        fingerprint: Some(call.fingerprint.clone()),
    };
    match mcp
        .calls
        .decide(Some(&tenant.name), &call.call_id, &decision)
        .map_err(store_failure)?
    {
        Decided::Applied { call, .. } | Decided::AlreadyDecided { call, .. } => Ok(call),
        Decided::NoRequest(call) => Ok(call),
        Decided::NotFound => Ok(call),
        Decided::ClientNotAllowed { call, .. } | Decided::FingerprintMismatch { call, .. } => {
            Err(not_the_clients(&call))
        }
    }
}

/// The token's principal as the audit names a person's.
fn principal(tenant: &Tenant) -> String {
    match tenant.principal == tenant.name {
        true => tenant.name.to_string(),
        false => format!("{}@{}", tenant.principal, tenant.name),
    }
}

fn not_the_clients(call: &Call) -> RpcError {
    (
        INVALID_PARAMS,
        "this call's approval is not the MCP client's to give: a person with the approver \
         role decides it (POST /v1/tool-calls/{call_id}/approve)"
            .to_string(),
        Some(json!({"call_id": call.call_id, "status": call.status.as_str()})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn an_answer_is_read_from_its_key_only() {
        let of = |v: Value| Answer::of(&params(v));
        assert_eq!(of(json!({})).unwrap(), Answer::None);
        let other = json!({"inputResponses": {"other": {"action": "accept"}}});
        assert_eq!(of(other).unwrap(), Answer::None);
        for (action, want) in [
            ("accept", Answer::Accept),
            ("decline", Answer::Decline),
            ("cancel", Answer::Dismissed),
        ] {
            let sent = json!({"inputResponses": {APPROVAL_INPUT: {"action": action}}});
            assert_eq!(of(sent).unwrap(), want, "{action}");
        }
        assert!(of(json!({"inputResponses": null})).is_err());
        assert!(of(json!({"inputResponses": {APPROVAL_INPUT: 12345}})).is_err());
        assert!(of(json!({"inputResponses": {APPROVAL_INPUT: {"action": "yes"}}})).is_err());
    }

    #[test]
    fn only_accept_and_decline_decide() {
        assert_eq!(Answer::Accept.verdict(), Some(Verdict::Approve));
        assert_eq!(Answer::Decline.verdict(), Some(Verdict::Deny));
        assert_eq!(Answer::Dismissed.verdict(), None);
        assert_eq!(Answer::None.verdict(), None);
    }
}
