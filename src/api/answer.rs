//! A call as REST answers it: its JSON written straight out
//! (`Call::write_json`, no tree: every `POST` renders one), with what the
//! answer adds — `duplicate_intent` when it is another key's call that holds
//! the request's business key, the last `progress` its tool reported
//! (`calls::last_progress`: on any node), and `waiting_for` while it is
//! pending (`Calls::waiting_for`: a worker, a slot, the rate, its backoff or
//! a pause) — `200` once it is terminal and `202` (with `Retry-After`, a
//! poll interval) while it is not. Every route that answers with a call
//! answers through here.

use super::service::{Api, POLL_AFTER_SECS};
use crate::http::Response;
use crate::store::Call;

impl Api {
    /// `call`'s answer, `duplicate_intent` marked when true.
    pub(super) fn answer_with_call(&self, call: &Call, duplicate_intent: bool) -> Response {
        let waiting = self.calls.waiting_for(call);
        written(call, duplicate_intent, waiting.map(|w| w.as_str()))
    }
}

/// A settled call's answer, which nothing this process knows can change
/// (what a same-key replay answers, and keeps).
pub(super) fn render(call: &Call, duplicate_intent: bool) -> Response {
    written(call, duplicate_intent, None)
}

fn written(call: &Call, duplicate_intent: bool, waiting_for: Option<&str>) -> Response {
    let progress = crate::calls::last_progress(call).map(|report| {
        serde_json::json!({
            "progress": report.progress,
            "total": report.total,
            "message": report.message,
            "at": report.at,
        })
    });
    let mut body = Vec::with_capacity(512);
    call.write_json(&mut body, duplicate_intent, progress.as_ref(), waiting_for);
    if call.status.is_terminal() {
        Response::json_bytes(200, body)
    } else {
        Response::json_bytes(202, body).with_header("Retry-After", POLL_AFTER_SECS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;
    use serde_json::json;

    fn call(status: Status) -> Call {
        Call {
            call_id: "c_0193a1b2c3d4e5f6".into(),
            tenant: "acme".into(),
            idem_key: "k \"quoted\" \\ é \u{1}".into(),
            fingerprint: "f".repeat(64),
            client_id: Some("agent-7".into()),
            seq: Some(-3),
            tool: "charge".into(),
            args_json: r#"{"amount":1.5,"memo":"ß","nested":{"b":[1,2],"a":null}}"#.into(),
            status,
            result: Some(json!({"ok": true, "n": 1e300, "s": "x\ny"})),
            error: None,
            attempt: 2,
            lease_until: Some(1.5),
            owner: Some("api".into()),
            effect_id: "eff_0193a1b2c3d4e5f6_0123456789abcdef0123456789abcdef".into(),
            created_at: 1_733_500_000.123_456,
            updated_at: 1_733_500_001.5,
            expires_at: None,
            next_attempt_at: Some(f64::NAN),
            cancel_requested_at: Some(0.1),
            progress: None,
        }
    }

    /// The answer is written without a tree, and is the tree's text byte
    /// for byte, with each member an answer may add in its place.
    #[test]
    fn a_call_written_straight_out_is_its_trees_text() {
        let progress = json!({"progress": 3.0, "total": null, "message": "half", "at": 1.5});
        let cases = [(false, None, None), (true, Some(&progress), Some("worker"))];
        for (duplicate_intent, progress, waiting) in cases {
            let call = call(Status::Running);
            let mut tree = call.to_json();
            if duplicate_intent {
                tree["duplicate_intent"] = true.into();
            }
            if let Some(progress) = progress {
                tree["progress"] = progress.clone();
            }
            if let Some(waiting) = waiting {
                tree["waiting_for"] = waiting.into();
            }
            let mut written = Vec::new();
            call.write_json(&mut written, duplicate_intent, progress, waiting);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                tree.to_string(),
                "duplicate_intent {duplicate_intent}, progress {progress:?}, waiting {waiting:?}"
            );
        }
        let settled = call(Status::Succeeded);
        let response = render(&settled, false);
        assert_eq!(response.status, 200);
        assert_eq!(
            response.body,
            format!("{}\n", settled.to_json()).into_bytes()
        );
    }
}
