//! `POST /v1/tools/{name}/pause` and `/resume` (`Calls::pause_tool`,
//! `resume_tool`; `store::paused` has the rules), and `GET /v1/tools`,
//! whose tools say whether they are paused. Optional body
//! `{"reason": "..."}` on a pause. Answers `200` and the tool's state
//! (`{"tool", "paused", "pause"}`) — the same however often it is sent —
//! or `404` for a tool this server does not run. Who may pause is
//! `operate`'s to say.

use super::error::ApiError;
use super::operate::{may_operate, Operation};
use super::service::Api;
use super::validate::{percent_decode, reason_of};
use crate::auth::Tenant;
use crate::http::{Request, Response};
use crate::input::quote;
use crate::store::{PausedTool, Toggled};
use serde_json::{json, Value};

impl Api {
    /// Pause (`pause`) or resume the tool `name`.
    pub(super) fn pause_or_resume(
        &self,
        req: &Request,
        tenant: &Tenant,
        name: &str,
        pause: bool,
    ) -> Result<Response, ApiError> {
        may_operate(tenant, Operation::OnTool)?;
        let name = percent_decode(name).ok_or_else(|| {
            ApiError::BadRequest("the tool name is not valid percent-encoded UTF-8".into())
        })?;
        if self.calls.tools().get(&name).is_none() {
            return Err(ApiError::NotFound(format!("tool {}", quote(&name))));
        }
        let toggled = match pause {
            true => {
                let reason = reason_of(&req.body, "a pause")?;
                self.calls
                    .pause_tool(&name, &tenant.name, reason.as_deref())?
            }
            false => {
                reason_of(&req.body, "a resume")?;
                self.calls.resume_tool(&name)?
            }
        };
        let (changed, paused) = match toggled {
            Toggled::Now(p) => (true, p),
            Toggled::Already(p) => (false, p),
        };
        Ok(Response::json(
            200,
            &json!({"tool": name, "paused": pause, "changed": changed, "pause": pause_json(paused.as_ref())}),
        ))
    }

    /// `GET /v1/tools`: every tool this server runs, each with whether it is
    /// paused (`paused`) and, if so, since when, by whom and why (`pause`).
    pub(super) fn tools_view(&self) -> Value {
        let mut view = self.calls.tools().public_view();
        if let Some(tools) = view["tools"].as_array_mut() {
            for tool in tools {
                let name = tool["name"].as_str().unwrap_or_default().to_string();
                let paused = self.calls.paused(&name);
                tool["paused"] = json!(paused.is_some());
                tool["pause"] = pause_json(paused.as_ref());
            }
        }
        view
    }
}

fn pause_json(paused: Option<&PausedTool>) -> Value {
    paused.map_or(Value::Null, PausedTool::to_json)
}
