//! A call request checked and made into the row to create: the chaos hooks
//! split off (and refused without `--chaos`), the tool's rules checked, the
//! business key computed when the tool has one, the approval gate when its
//! policy holds for the args, the args made canonical and
//! held to `MAX_ARGS_BYTES`, and the fingerprint computed over the tool and
//! its args without the hooks.
//!
//! Nothing here touches the store, the key cache or the runner: a request
//! refused here has changed nothing.

use super::error::CallError;
use super::request::CallRequest;
use crate::auth::Tenant;
use crate::chaos;
use crate::fingerprint::{canonical_object, fingerprint_canonical};
use crate::store::{Approvers, BusinessKey, Gate, NewCall};
use crate::tools::{OnDuplicate, Prepared, ToolRegistry};
use serde_json::{Map, Value};
use std::time::Duration;

/// Largest canonical `args`, in bytes.
const MAX_ARGS_BYTES: usize = 64 * 1024;

/// A request that passed every check, ready to be created.
pub(super) struct Checked {
    pub(super) new: NewCall,
    /// The call's business key and what a duplicate intent is answered
    /// with, when its tool has a business-key rule.
    pub(super) guard: Option<(BusinessKey, OnDuplicate)>,
    /// Its tool returns at once and it carries no chaos hook: it may be
    /// reserved a worker behind other quick work (`Runner::reserve`).
    pub(super) quick: bool,
    /// The `_delay_response_ms` hook: how long a new call's answer is held.
    pub(super) delay_response: Option<Duration>,
}

/// Check `request` against `tools` (`chaos`: whether hooks are accepted).
pub(super) fn check(
    tools: &ToolRegistry,
    chaos: bool,
    request: CallRequest,
) -> Result<Checked, CallError> {
    let invalid = |e: &dyn std::fmt::Display| CallError::Invalid(e.to_string());
    let (tool_args, hooks) = chaos::split(request.args).map_err(|e| invalid(&e))?;
    refuse_hooks_without_chaos(request.args, chaos)?;
    let prepared = tools
        .prepare(request.tool, &tool_args)
        .map_err(|e| invalid(&e))?;
    let guard = business_key(&prepared, &tool_args)?;
    let gate = approval_gate(&prepared, &tool_args, request.tenant);
    let hooked = hooks != chaos::Hooks::default();
    let canonical_args = canonical_object(&tool_args);
    let fingerprint = fingerprint_canonical(request.tool, &canonical_args);
    // What the worker runs: the tool's args plus any hooks, canonical too.
    let args_json = if hooked {
        canonical_object(request.args)
    } else {
        canonical_args
    };
    if args_json.len() > MAX_ARGS_BYTES {
        return Err(CallError::ArgsTooLarge {
            size: args_json.len(),
            limit: MAX_ARGS_BYTES,
        });
    }
    let new = NewCall {
        tenant: request.tenant.name.to_string(),
        idem_key: request.key.to_string(),
        fingerprint,
        tool: request.tool.to_string(),
        args_json,
        client_id: request.client_id,
        seq: request.seq,
        gate,
    };
    Ok(Checked {
        new,
        guard,
        quick: prepared.quick && !hooked,
        delay_response: hooks.delay_response,
    })
}

/// A chaos hook is a fault this server injects into itself: accepted only
/// from a server started with `--chaos`.
fn refuse_hooks_without_chaos(args: &Map<String, Value>, chaos: bool) -> Result<(), CallError> {
    match chaos::names_a_hook(args) {
        Some(hook) if !chaos => Err(CallError::Invalid(format!(
            "args.{hook} is a chaos hook; the server must run with --chaos"
        ))),
        _ => Ok(()),
    }
}

/// Whether the call waits for a decision: its tool's approval policy holds
/// for its args (chaos hooks removed). Who may decide: people, and also the
/// MCP client when both the policy and the tenant allow it. A tool without
/// a policy costs one branch.
fn approval_gate(
    prepared: &Prepared,
    tool_args: &Map<String, Value>,
    tenant: &Tenant,
) -> Option<Gate> {
    let policy = prepared.spec.approval.as_ref()?;
    if !policy.holds(tool_args) {
        return None;
    }
    let approvers = match policy.mcp_client && tenant.client_may_approve {
        true => Approvers::PeopleOrClient,
        false => Approvers::People,
    };
    Some(Gate {
        approvers,
        timeout: policy.timeout,
        notify: tenant.notify,
    })
}

/// The call's business key under its tool's rule, if the tool has one.
fn business_key(
    prepared: &Prepared,
    tool_args: &Map<String, Value>,
) -> Result<Option<(BusinessKey, OnDuplicate)>, CallError> {
    let Some(rule) = &prepared.spec.business_key else {
        return Ok(None);
    };
    let value = rule
        .key_of(tool_args)
        .map_err(|e| CallError::Invalid(e.to_string()))?;
    let key = BusinessKey {
        value,
        window_secs: rule.window_secs as f64,
    };
    Ok(Some((key, rule.on_duplicate)))
}
