//! A call awaiting approval, put to the MCP client that made it through the
//! 2026-07-28 input requests (SEP-2322), where — and only where — its
//! answers may count as the decision: the call's stored request admits the
//! client (the tool's policy said `mcp_client` and the tenant allowed
//! `mcp_client_may_approve` when the call was made), the policy and the
//! tenant still allow it now, and the request declares the client's
//! `elicitation` capability.
//!
//! What it is asked is the policy's questions (`tools::Inputs`), one round
//! at a time, each an `elicitation/create` form under its key: by default
//! one, `approval`, a confirmation whose message shows the tool and its
//! arguments. `accept` (its content held to the question's schema) answers
//! a question, `decline` denies the call, `cancel` answers nothing (it is
//! asked again); keys it did not ask now are ignored. Answers are recorded
//! as they come (`Calls::note_input_answers`, durable before the reply), so
//! a later request, a `tasks/get` on another node or the tool itself reads
//! them back; once every question has its answer the call is approved.
//! Without tasks a `tools/call` answers an `input_required` result whose
//! `requestState` names the call and the round
//! (`approval:<call_id>:<fingerprint>:<round>`); re-sent with the answers
//! (and that state, or the same key), they are recorded and the call runs
//! and is answered as any call once approved. With tasks the task shows
//! `input_required` with the open questions, and `tasks/update` carries the
//! answers — or, for a policy with `before_task`, the questions come first
//! as `tools/call`'s own answers and the task is made once they are answered.
//!
//! A decision goes through `Calls::decide` with `Source::Client`, bound to
//! the call's fingerprint: single-use, audited (`approved`/`denied`, source
//! `client`), and refused by the store itself when the stored request is
//! for people only. This module never decides anything where the client may
//! not, never reads a request's state as trusted (it only has to match the
//! call it names), and never logs arguments or answers.

use super::endpoint::Mcp;
use super::jsonrpc::INVALID_PARAMS;
use super::tasks::declared;
use super::tools_call::{store_failure, RpcError};
use crate::auth::Tenant;
use crate::store::{Approvers, Call, Decided, Decision, Source, Status, Verdict};
use crate::tools::{Inputs, Question};
use serde_json::{json, Map, Value};

/// The most bytes of a call's arguments shown in the confirmation's message.
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

/// The questions put to the client now: the open round's (its index), and
/// those of it not yet answered, as `inputRequests`.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub round: usize,
    pub requests: Value,
}

/// What the client answered to the open round in one request.
#[derive(Debug, Default, PartialEq)]
struct Answers {
    /// Accepted questions' content, by key, each checked against its schema.
    accepted: Map<String, Value>,
    /// A question was declined: the call is denied.
    declined: bool,
}

/// `params.inputResponses`: absent, or an object (else `-32602`).
fn responses(params: &Map<String, Value>) -> Result<Option<&Map<String, Value>>, RpcError> {
    match params.get("inputResponses") {
        None => Ok(None),
        Some(Value::Object(responses)) => Ok(Some(responses)),
        Some(_) => Err(invalid("params.inputResponses must be an object".into())),
    }
}

/// Read the answers to `round`'s questions among `responses` (other keys
/// are ignored); a malformed answer, or content its schema refuses, is
/// `-32602`.
fn read_answers(round: &[Question], responses: &Map<String, Value>) -> Result<Answers, RpcError> {
    let mut answers = Answers::default();
    for question in round {
        let Some(response) = responses.get(&question.key) else {
            continue;
        };
        let malformed = || {
            invalid(format!(
                "inputResponses.{} must be an elicitation result: {{\"action\": \"accept\" | \
                 \"decline\" | \"cancel\", \"content\"?: {{...}}}}",
                question.key
            ))
        };
        match response.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let content = match response.get("content") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(content)) => content.clone(),
                    Some(_) => return Err(malformed()),
                };
                question.check(&content).map_err(invalid)?;
                answers
                    .accepted
                    .insert(question.key.clone(), Value::Object(content));
            }
            Some("decline") => answers.declined = true,
            Some("cancel") => {}
            _ => return Err(malformed()),
        }
    }
    Ok(answers)
}

fn invalid(message: String) -> RpcError {
    (INVALID_PARAMS, message, None)
}

/// The questions `call`'s tool asks (one confirmation when its policy is
/// gone or names none).
fn inputs_of(mcp: &Mcp, call: &Call) -> Inputs {
    mcp.calls
        .tools()
        .get(&call.tool)
        .and_then(|spec| spec.approval.as_ref())
        .map_or_else(Inputs::confirmation, |policy| policy.inputs.clone())
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

/// The questions that put `call`'s approval to its client now, if this
/// asker may be asked (`None`: a person decides, the client takes no
/// elicitation, or every question has its answer).
pub fn input_requests(mcp: &Mcp, asker: &Asker, call: &Call) -> Result<Option<Asked>, RpcError> {
    if !asker.elicits || !client_may_decide(mcp, &asker.tenant, call)? {
        return Ok(None);
    }
    let inputs = inputs_of(mcp, call);
    let answered = mcp
        .calls
        .input_answers(&asker.tenant.name, &call.call_id)
        .map_err(store_failure)?;
    let Some((round, questions)) = inputs.open_round(&answered) else {
        return Ok(None);
    };
    let requests = questions
        .iter()
        .filter(|q| !answered.contains_key(&q.key))
        .map(|q| {
            let message = q.message.clone().unwrap_or_else(|| confirmation(call));
            let request = json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": message,
                    "requestedSchema": q.requested_schema(),
                },
            });
            (q.key.clone(), request)
        });
    Ok(Some(Asked {
        round,
        requests: Value::Object(requests.collect()),
    }))
}

/// The confirmation's message: the tool and its arguments (cut short).
fn confirmation(call: &Call) -> String {
    let mut args = call.args_json.clone();
    if args.len() > MAX_SHOWN_ARGS {
        let mut cut = MAX_SHOWN_ARGS;
        while !args.is_char_boundary(cut) {
            cut -= 1;
        }
        args.truncate(cut);
        args.push('…');
    }
    format!(
        "Approve this call? Tool {} with arguments {args}. Accept runs it once; decline \
         denies it (it never runs).",
        call.tool
    )
}

/// `tools/call`'s `input_required` result for `call`.
pub fn input_required(call: &Call, asked: Asked) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": asked.requests,
        "requestState": request_state(call, asked.round),
    })
}

/// The state an `input_required` result carries: the call it asks about,
/// and which round.
fn request_state(call: &Call, round: usize) -> String {
    format!(
        "{STATE_PREFIX}{}:{}:{round}",
        call.call_id, call.fingerprint
    )
}

/// The call a re-sent `tools/call`'s `requestState` names (`None` when it
/// sends none). A state this server did not mint for one of the tenant's
/// calls of this tool is `-32602`: nothing is created or decided for it.
pub fn stated_call(
    mcp: &Mcp,
    tenant: &Tenant,
    tool: &str,
    params: &Map<String, Value>,
) -> Result<Option<Call>, RpcError> {
    let Some(state) = params.get("requestState") else {
        return Ok(None);
    };
    let refused =
        || invalid("requestState is not one this server gave for this tool's call".into());
    let (call_id, fingerprint, _round) = state
        .as_str()
        .and_then(|s| s.strip_prefix(STATE_PREFIX))
        .and_then(|s| {
            let mut parts = s.splitn(3, ':');
            Some((parts.next()?, parts.next()?, parts.next()?))
        })
        .filter(|(_, _, round)| {
            round
                .parse::<usize>()
                .is_ok_and(|r| r.to_string() == *round)
        })
        .ok_or_else(refused)?;
    let call = mcp
        .calls
        .get(&tenant.name, call_id)
        .map_err(store_failure)?
        .filter(|call| call.tool == tool && call.fingerprint == fingerprint)
        .ok_or_else(refused)?;
    Ok(Some(call))
}

/// Record the client's answers to `call`'s open questions in
/// `params.inputResponses`, if it gave any: the call as it then is. Every
/// question answered approves it; a declined one denies it. An answer where
/// the client may not decide is refused (`-32602`), never taken as a
/// person's approval.
pub fn answer(
    mcp: &Mcp,
    tenant: &Tenant,
    call: Call,
    params: &Map<String, Value>,
) -> Result<Call, RpcError> {
    let Some(responses) = responses(params)? else {
        return Ok(call);
    };
    if call.status != Status::AwaitingApproval {
        // Decided already (these answers re-sent, or a person was first):
        // the call says how.
        return Ok(call);
    }
    let inputs = inputs_of(mcp, &call);
    let mut answered = mcp
        .calls
        .input_answers(&tenant.name, &call.call_id)
        .map_err(store_failure)?;
    let answers = match inputs.open_round(&answered) {
        Some((_, round)) => read_answers(round, responses)?,
        // Every answer recorded, the decision not (it failed): decide now.
        None => Answers::default(),
    };
    let nothing_new = answers.accepted.is_empty() && !answers.declined;
    if nothing_new && inputs.open_round(&answered).is_some() {
        return Ok(call);
    }
    if !client_may_decide(mcp, tenant, &call)? {
        return Err(not_the_clients(&call));
    }
    if answers.declined {
        return decide(mcp, tenant, call, Verdict::Deny);
    }
    if !answers.accepted.is_empty() {
        let noted = mcp
            .calls
            .note_input_answers(
                &tenant.name,
                &call.call_id,
                &call.fingerprint,
                &answers.accepted,
            )
            .map_err(store_failure)?;
        if !noted {
            // Decided meanwhile (a person, or another request): as it is now.
            return Ok(mcp
                .calls
                .get(&tenant.name, &call.call_id)
                .map_err(store_failure)?
                .unwrap_or(call));
        }
        for (key, content) in answers.accepted {
            answered.entry(key).or_insert(content);
        }
    }
    match inputs.open_round(&answered) {
        Some(_) => Ok(call),
        None => decide(mcp, tenant, call, Verdict::Approve),
    }
}

/// The client's decision of `call`, through the store's single-use update.
fn decide(mcp: &Mcp, tenant: &Tenant, call: Call, verdict: Verdict) -> Result<Call, RpcError> {
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

    fn round() -> Vec<Question> {
        let inputs = Inputs::parse(&json!([{
            "name": {"message": "Your name?", "schema": {"type": "object",
                     "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "ok": {"message": "Sure?", "schema": {"type": "object"}}
        }]))
        .unwrap();
        inputs.open_round(&Map::new()).unwrap().1.to_vec()
    }

    fn read(responses: Value) -> Result<Answers, RpcError> {
        read_answers(&round(), responses.as_object().unwrap())
    }

    #[test]
    fn answers_are_read_by_the_keys_asked_only() {
        assert_eq!(read(json!({})).unwrap(), Answers::default());
        let other = read(json!({"other": {"action": "accept"}})).unwrap();
        assert_eq!(other, Answers::default());
        let one =
            read(json!({"name": {"action": "accept", "content": {"name": "Alice"}}})).unwrap();
        assert_eq!(
            Value::Object(one.accepted),
            json!({"name": {"name": "Alice"}})
        );
        assert!(!one.declined);
        let declined = read(json!({"ok": {"action": "decline"}})).unwrap();
        assert!(declined.declined && declined.accepted.is_empty());
        let dismissed = read(json!({"ok": {"action": "cancel"}})).unwrap();
        assert_eq!(dismissed, Answers::default());
        let bare = read(json!({"ok": {"action": "accept"}})).unwrap();
        assert_eq!(Value::Object(bare.accepted), json!({"ok": {}}));
    }

    #[test]
    fn a_malformed_answer_or_content_its_schema_refuses_is_invalid_params() {
        for bad in [
            json!({"name": 12345}),
            json!({"ok": {"action": "yes"}}),
            json!({"ok": {"action": "accept", "content": "x"}}),
            json!({"name": {"action": "accept", "content": {"name": 7}}}),
            json!({"name": {"action": "accept", "content": {}}}),
        ] {
            let (code, message, _) = read(bad.clone()).unwrap_err();
            assert_eq!(code, INVALID_PARAMS, "{bad}");
            assert!(message.contains("inputResponses."), "{bad}: {message}");
        }
        let not_an_object = json!({"inputResponses": null});
        assert!(responses(not_an_object.as_object().unwrap()).is_err());
    }
}
