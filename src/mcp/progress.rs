//! Progress for a `tools/call` that carries `_meta.progressToken` and takes
//! an event stream: the answer is a `text/event-stream` written while the
//! call runs — each report its tool makes (`tools::progress`, a `command`
//! tool's `$PROGRESS_FD` lines; on another node, the report it stored with
//! the call) goes out as a `notifications/progress` the moment this request
//! sees it, a call that reports nothing gets one every `HEARTBEAT` with the
//! time it has run, and the response ends the stream. So a host's request
//! timeout, which progress resets, never runs out under a long call.
//!
//! It never changes a call: a client that goes away ends the wait (and the
//! stream), never the call, whose outcome is there for the same key.

use super::events::Events;
use super::tools_call::{store_failure, RpcError};
use crate::calls::{last_progress, Calls};
use crate::http::ClientProbe;
use crate::store::Call;
use crate::tools::progress::board;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a call that reports nothing is said to be running.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// How often the call is re-read and the board looked at while it runs
/// (the call's completion in this process wakes the wait at once).
const POLL: Duration = Duration::from_millis(200);
/// Kept for the response at the end of a stream the server bounds.
const FINAL_MARGIN: Duration = Duration::from_secs(5);

/// The request's progress token, if it asked for progress.
pub fn token(params: &Map<String, Value>) -> Option<Value> {
    let token = params.get("_meta")?.get("progressToken")?;
    (token.is_string() || token.is_i64() || token.is_u64()).then(|| token.clone())
}

/// A call being waited for with progress: what the stream needs once the
/// request's handler has returned.
pub struct Follow {
    pub calls: Arc<Calls>,
    pub call: Call,
    pub token: Value,
    /// How long to wait for the call to settle (`--mcp-wait-secs`).
    pub wait: Duration,
    /// The request's client, for the wait to end when it goes.
    pub client: ClientProbe,
    /// The call's `CallToolResult`, once waited for.
    pub answer: Box<dyn FnOnce(&Call) -> Value + Send>,
}

impl Follow {
    /// Wait for the call, its progress sent on `events` as it comes; then
    /// its result.
    pub fn run(self, events: &mut Events<'_>) -> Result<Value, RpcError> {
        let Follow {
            calls,
            call,
            token,
            wait,
            client,
            answer,
        } = self;
        let call = report_until_settled(&calls, call, wait, &token, &client, events)?;
        Ok(answer(&call))
    }
}

/// Wait up to `wait` for `call` to settle, sending each new progress report
/// as a notification for `token`; stop early when the client goes.
fn report_until_settled(
    calls: &Calls,
    mut call: Call,
    wait: Duration,
    token: &Value,
    client: &ClientProbe,
    events: &mut Events<'_>,
) -> Result<Call, RpcError> {
    let started = Instant::now();
    let deadline = started + wait.min(events.remaining().saturating_sub(FINAL_MARGIN));
    let mut seen = Seen::default();
    let mut last_note = started;
    loop {
        for params in seen.new_reports(&call, token) {
            if events.send(&notification(params)).is_err() {
                return Ok(call);
            }
            last_note = Instant::now();
        }
        let now = Instant::now();
        if call.status.is_terminal() || now >= deadline || !events.is_open() {
            return Ok(call);
        }
        if now - last_note >= HEARTBEAT {
            let elapsed = (now - started).as_secs();
            let params = json!({
                "progressToken": token,
                "progress": seen.last_progress.unwrap_or(elapsed as f64),
                "message": format!("running for {elapsed} s"),
            });
            if events.send(&notification(params)).is_err() {
                return Ok(call);
            }
            last_note = now;
        }
        call = calls
            .wait(call, POLL.min(deadline - now), || client.gone())
            .map_err(store_failure)?;
    }
}

/// What this request has already told its client.
#[derive(Default)]
struct Seen {
    /// The last board report sent (this process's sequence).
    seq: u64,
    /// When the last stored report sent was made (another node's).
    stored_at: Option<f64>,
    last_progress: Option<f64>,
}

impl Seen {
    /// The notifications' params for the reports not sent yet: every new
    /// one on this process's board, else the one another node stored.
    fn new_reports(&mut self, call: &Call, token: &Value) -> Vec<Value> {
        let mut params = Vec::new();
        for report in board().since(&call.call_id, self.seq) {
            self.seq = report.seq;
            params.push(report_params(
                token,
                report.progress,
                report.total,
                report.message,
            ));
            self.last_progress = Some(report.progress);
        }
        if self.seq == 0 {
            if let Some(stored) = last_progress(call) {
                if self.stored_at != Some(stored.at) {
                    self.stored_at = Some(stored.at);
                    self.last_progress = Some(stored.progress);
                    params.push(report_params(
                        token,
                        stored.progress,
                        stored.total,
                        stored.message,
                    ));
                }
            }
        }
        params
    }
}

fn report_params(
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
) -> Value {
    let mut params = json!({"progressToken": token, "progress": progress});
    if let Some(total) = total {
        params["total"] = total.into();
    }
    if let Some(message) = message {
        params["message"] = message.into();
    }
    params
}

fn notification(params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
}
