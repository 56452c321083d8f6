//! `subscriptions/listen` (2026-07-28) for task status notifications, as the
//! Tasks extension defines them: the client names the tasks it follows
//! (`params.notifications.taskIds`), and the answer is an event stream —
//! `notifications/subscriptions/acknowledged` first, naming the task ids
//! agreed to (the tenant's own tasks; any other id is left out, exactly as
//! one that never existed), then a `notifications/tasks` carrying each
//! task's `DetailedTask` (what `tasks/get` answers) now and whenever it
//! changes, each tagged with the subscription's id (the listen request's);
//! then the `subscriptions/listen` result, once every task followed has
//! ended (`completed`, `failed`, `cancelled`) or after `LISTEN_FOR`.
//!
//! A change is seen as every wait here sees one: a completion in this
//! process wakes the wait at once, another node's arrives through the
//! store's wake-ups (PostgreSQL's `LISTEN`/`NOTIFY`) or the re-read every
//! `RECHECK`, and a running task's progress shows in its status message.
//! Other notification types (list changes) are never sent: this server has
//! no list that changes. It never changes a call, and keeps nothing once the
//! stream ends: a client that goes away ends it.

use super::approval_input::Asker;
use super::endpoint::Mcp;
use super::events::Events;
use super::handshake::Revision;
use super::jsonrpc::{Id, INVALID_PARAMS};
use super::tasks;
use super::tools_call::{store_failure, RpcError};
use crate::auth::Tenant;
use crate::store::Call;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most tasks one stream follows.
pub const MAX_TASKS: usize = 32;
/// How long one stream lasts at most; the client listens again after.
pub const LISTEN_FOR: Duration = Duration::from_secs(5 * 60);
/// How often the tasks followed are re-read without a wake-up.
const RECHECK: Duration = Duration::from_millis(250);
/// Kept for the result at the end of a stream the server bounds.
const FINAL_MARGIN: Duration = Duration::from_secs(5);
/// The `_meta` key each message of the stream carries.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// An agreed subscription: what its stream needs once the handler returns.
pub struct Listening {
    mcp: Arc<Mcp>,
    tenant: String,
    /// Who listens: whether a task awaiting approval is put to its client.
    asker: Asker,
    revision: Revision,
    subscription: Id,
    /// The tenant's tasks named by the request, as first read.
    tasks: Vec<Call>,
    /// Whether the client asked for task ids at all (the ack then names
    /// the ones agreed to, possibly none).
    asked_for_tasks: bool,
}

/// Check a `subscriptions/listen` and read the tasks it names.
pub fn open(
    mcp: &Arc<Mcp>,
    tenant: &Tenant,
    revision: Revision,
    params: &Map<String, Value>,
    id: &Id,
) -> Result<Listening, RpcError> {
    let invalid = |message: &str| (INVALID_PARAMS, message.to_string(), None);
    let filter = match params.get("notifications") {
        Some(Value::Object(filter)) => filter,
        _ => return Err(invalid("params.notifications (an object) is required")),
    };
    let ids = match filter.get("taskIds") {
        None => None,
        Some(Value::Array(ids)) => Some(ids),
        Some(_) => return Err(invalid("notifications.taskIds must be an array of strings")),
    };
    let mut tasks = Vec::new();
    if let Some(ids) = ids {
        if !tasks::negotiated(revision, params) {
            return Err(tasks::missing_extension());
        }
        if ids.len() > MAX_TASKS {
            let message = format!("notifications.taskIds names more than {MAX_TASKS} tasks");
            return Err(invalid(&message));
        }
        for id in ids {
            let id = id
                .as_str()
                .ok_or_else(|| invalid("notifications.taskIds must be an array of strings"))?;
            let found = mcp.calls.get(&tenant.name, id).map_err(store_failure)?;
            if let Some(call) =
                found.filter(|c| !tasks.iter().any(|t: &Call| t.call_id == c.call_id))
            {
                tasks.push(call);
            }
        }
    }
    Ok(Listening {
        mcp: Arc::clone(mcp),
        tenant: tenant.name.to_string(),
        asker: Asker::of(tenant, params),
        revision,
        subscription: id.clone(),
        tasks,
        asked_for_tasks: ids.is_some(),
    })
}

impl Listening {
    /// The stream: the acknowledgement, each task now and at each change,
    /// then the result (`None` if the client went first).
    pub fn run(self, events: &mut Events<'_>) -> Result<Value, RpcError> {
        let deadline =
            Instant::now() + LISTEN_FOR.min(events.remaining().saturating_sub(FINAL_MARGIN));
        if events.send(&self.acknowledgement()).is_err() {
            return Ok(self.result());
        }
        let mut followed: Vec<(Call, Option<Value>)> = self
            .tasks
            .iter()
            .cloned()
            .map(|call| (call, None))
            .collect();
        loop {
            for (call, sent) in followed.iter_mut() {
                let task = tasks::detailed(&self.mcp, call, self.revision, &self.asker)?;
                if sent.as_ref() != Some(&task) {
                    if events.send(&self.notification(&task)).is_err() {
                        return Ok(self.result());
                    }
                    *sent = Some(task);
                }
            }
            followed.retain(|(call, _)| !call.status.is_terminal());
            let now = Instant::now();
            if followed.is_empty() || now >= deadline || !events.is_open() {
                return Ok(self.result());
            }
            self.reread(&mut followed, (deadline - now).min(RECHECK))?;
        }
    }

    /// Wait up to `slice` on the first task (its change wakes this at once),
    /// then read every task again.
    fn reread(
        &self,
        followed: &mut [(Call, Option<Value>)],
        slice: Duration,
    ) -> Result<(), RpcError> {
        let calls = &self.mcp.calls;
        if let Some((first, _)) = followed.first_mut() {
            *first = calls
                .wait(first.clone(), slice, || false)
                .map_err(store_failure)?;
        }
        for (call, _) in followed.iter_mut().skip(1) {
            if let Some(now) = calls
                .get(&self.tenant, &call.call_id)
                .map_err(store_failure)?
            {
                *call = now;
            }
        }
        Ok(())
    }

    fn meta(&self) -> Value {
        json!({ META_SUBSCRIPTION_ID: self.subscription })
    }

    fn acknowledgement(&self) -> Value {
        let mut agreed = json!({});
        if self.asked_for_tasks {
            let ids: Vec<&str> = self.tasks.iter().map(|c| c.call_id.as_str()).collect();
            agreed["taskIds"] = json!(ids);
        }
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": agreed, "_meta": self.meta()},
        })
    }

    fn notification(&self, task: &Value) -> Value {
        let mut params = task.clone();
        params["_meta"] = self.meta();
        json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params})
    }

    /// `SubscriptionsListenResult`: the subscription ended gracefully.
    fn result(&self) -> Value {
        json!({"_meta": self.meta()})
    }
}
