//! Progress for a `tools/call` that carries `_meta.progressToken`: while the
//! request waits for its call, each report its tool made (`tools::progress`,
//! a `command` tool's `$PROGRESS_FD` lines) becomes a `notifications/progress`,
//! and a call that reports nothing gets one every `HEARTBEAT` with the time
//! it has run (an `http` tool's heartbeats, which extend its lease, say only
//! that). The answer is then a `text/event-stream` body: the notifications,
//! then the response.
//!
//! This server writes each response whole, so the notifications arrive with
//! the answer, not as they happen; a long call's live progress is a task's
//! `statusMessage` (`tasks/get`). It never changes a call.

use super::endpoint::Mcp;
use super::tools_call::{store_failure, RpcError};
use crate::http::{Request, Response};
use crate::store::Call;
use crate::tools::progress::board;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// How often a call that reports nothing is said to be running.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// How often the board is read while the call runs.
const POLL: Duration = Duration::from_millis(50);

/// The request's progress token, if it asked for progress.
pub fn token(params: &Map<String, Value>) -> Option<Value> {
    let token = params.get("_meta")?.get("progressToken")?;
    (token.is_string() || token.is_i64() || token.is_u64()).then(|| token.clone())
}

/// Wait up to `wait` for `call` to settle, turning its progress into
/// notifications for `token` on `notes`.
pub fn settle_reporting(
    mcp: &Mcp,
    req: &Request,
    mut call: Call,
    wait: Duration,
    token: &Value,
    notes: &mut Vec<Value>,
) -> Result<Call, RpcError> {
    let started = Instant::now();
    let deadline = started + wait;
    let (mut seen, mut last_note) = (0u64, started);
    let mut last_progress: Option<f64> = None;
    loop {
        for report in board().since(&call.call_id, seen) {
            seen = report.seq;
            last_progress = Some(report.progress);
            let mut params = json!({"progressToken": token, "progress": report.progress});
            if let Some(total) = report.total {
                params["total"] = total.into();
            }
            if let Some(message) = report.message {
                params["message"] = message.into();
            }
            notes.push(notification(params));
            last_note = Instant::now();
        }
        let now = Instant::now();
        if call.status.is_terminal() || now >= deadline || req.client.gone() {
            return Ok(call);
        }
        if now - last_note >= HEARTBEAT {
            let elapsed = (now - started).as_secs();
            notes.push(notification(json!({
                "progressToken": token,
                "progress": last_progress.unwrap_or(elapsed as f64),
                "message": format!("running for {elapsed} s"),
            })));
            last_note = now;
        }
        let slice = POLL.min(deadline - now);
        call = mcp
            .calls
            .wait(call, slice, || req.client.gone())
            .map_err(store_failure)?;
    }
}

fn notification(params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
}

/// The notifications, then the response, as one `text/event-stream` body.
pub fn event_stream(status: u16, notes: &[Value], response: &Value) -> Response {
    let mut body = String::new();
    for message in notes.iter().chain([response]) {
        body.push_str("event: message\ndata: ");
        body.push_str(&message.to_string());
        body.push_str("\n\n");
    }
    Response {
        status,
        headers: vec![
            ("Content-Type".into(), "text/event-stream".into()),
            ("Cache-Control".into(), "no-cache".into()),
        ],
        body: body.into_bytes(),
    }
}
