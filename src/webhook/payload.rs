//! What a webhook says: the Standard Webhooks payload (`type`, `timestamp`,
//! `data`) of a call that started waiting for approval — enough for a chat
//! tool to show what will run and where to decide it: the call, its tool
//! and arguments, its key, when its request expires, and the paths of the
//! decision routes and of the console's queue.
//!
//! The body is built from rows that never change once written (the call's
//! tool, args and key; the request's times), so every attempt of one
//! message sends the same bytes. Never a token or a secret.

use crate::store::Notification;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The body of `notification`, as sent.
pub fn body(notification: &Notification) -> Vec<u8> {
    payload(notification).to_string().into_bytes()
}

fn payload(notification: &Notification) -> Value {
    let call = &notification.call;
    let approval = &notification.approval;
    let args = serde_json::from_str::<Value>(&call.args_json).unwrap_or(Value::Null);
    let at = UNIX_EPOCH + Duration::from_secs_f64(notification.created_at.max(0.0));
    json!({
        "type": notification.event,
        "timestamp": rfc3339(at),
        "data": {
            "call_id": call.call_id,
            "tenant": call.tenant,
            "tool": call.tool,
            "idem_key": call.idem_key,
            "args": args,
            "fingerprint": approval.fingerprint,
            "approvers": approval.approvers.as_str(),
            "requested_at": approval.requested_at,
            "expires_at": approval.expires_at,
            "approve_path": format!("/v1/tool-calls/{}/approve", call.call_id),
            "deny_path": format!("/v1/tool-calls/{}/deny", call.call_id),
            "console_path": "/ui/approvals",
        }
    })
}

fn rfc3339(at: SystemTime) -> String {
    crate::rfc3339::rfc3339_millis(at)
}
