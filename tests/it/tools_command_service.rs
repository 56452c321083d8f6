//! `command` tools through the real service (`--tools FILE`): the call's JSON
//! on stdin and its `effect_id` as `IDEMPOTENCY_KEY`, exit 0 / 75 / 1
//! classified and retried as documented, the exit code in `effects.detail`,
//! and a configured `env` secret kept out of every answer.

use crate::support;

use crate::support::downstream::ToolsFile;
use crate::support::Http;
use crate::support::{audit_events, unique_name, Server, TempDb};
use serde_json::{json, Value};

const SECRET: &str = "cmd-SERVICE-SECRET-51";

/// A tools file with one `command` tool `notify` running `script` under
/// `/bin/sh -c`, three attempts, quick backoff.
fn tools_file(script: &str) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {"notify": {
        "kind": "command",
        "argv": ["/bin/sh", "-c", script],
        "env": {"CHANNEL": "ops", "NOTIFY_TOKEN": "${TOOLS_CMD_TEST_TOKEN}"},
        "max_attempts": 3,
        "backoff_ms": {"initial": 20, "max": 50},
        "timeout_ms": 10000
    }}}))
}

fn run_one(script: &str) -> (Server, Value, TempDb) {
    let tools = tools_file(script);
    let db = TempDb::new("tools-command");
    let server = Server::start_with_env(
        &db,
        &["--tools", tools.path_str()],
        &[("TOOLS_CMD_TEST_TOKEN", SECRET)],
    );
    let body = json!({"tool": "notify", "args": {"text": "deploy done"}});
    let (status, call) = server.post(&unique_name("notify"), &body);
    assert_eq!(status, 202, "{call}");
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert!(!done.to_string().contains(SECRET), "{done}");
    assert!(!server.stderr().contains(SECRET));
    (server, done, db)
}

fn effect_detail(server: &Server, call_id: &str) -> Option<Value> {
    server
        .sql()
        .query_row(
            "SELECT detail FROM effects WHERE call_id = ?1",
            [call_id],
            |r| r.get::<_, String>(0),
        )
        .ok()
        .map(|d| serde_json::from_str(&d).unwrap())
}

/// Exit 0: `succeeded` with stdout as the result; the command read the call
/// on stdin and found its `effect_id` as `IDEMPOTENCY_KEY`; one effect whose
/// detail is the exit code.
#[test]
fn exit_0_succeeds_with_the_call_on_stdin_and_the_effect_id_as_key() {
    let script = r#"body=$(cat); printf '{"key":"%s","attempt":%s,"channel":"%s","stdin":%s}' "$IDEMPOTENCY_KEY" "$ATTEMPT" "$CHANNEL" "$body""#;
    let (server, done, _db) = run_one(script);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(1)),
        "{done}"
    );
    let result = &done["result"];
    assert_eq!(result["key"], done["effect_id"]);
    assert_eq!(
        (result["attempt"].as_i64(), result["channel"].as_str()),
        (Some(1), Some("ops"))
    );
    assert_eq!(result["stdin"]["call_id"], done["call_id"]);
    assert_eq!(result["stdin"]["effect_id"], done["effect_id"]);
    assert_eq!(result["stdin"]["args"], json!({"text": "deploy done"}));
    let call_id = done["call_id"].as_str().unwrap();
    assert_eq!(
        effect_detail(&server, call_id),
        Some(json!({"exit_code": 0}))
    );
}

/// Exit 75 (`EX_TEMPFAIL`) is retried: the second attempt succeeds.
#[test]
fn exit_75_is_retried_automatically() {
    let script =
        r#"if [ "$ATTEMPT" -lt 2 ]; then echo busy >&2; exit 75; fi; echo '{"sent":true}'"#;
    let (server, done, _db) = run_one(script);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    assert_eq!(done["result"], json!({"sent": true}));
    let call_id = done["call_id"].as_str().unwrap();
    assert_eq!(
        audit_events(&server.db, call_id),
        [
            "created",
            "claimed",
            "retry_scheduled",
            "claimed",
            "succeeded"
        ]
    );
}

/// Exit 75 on every attempt: after `max_attempts` the call is `failed` with
/// the last error, still retryable by a same-key POST.
#[test]
fn exit_75_on_every_attempt_fails_after_the_last_one() {
    let (_server, done, _db) = run_one("exit 75");
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("failed"), Some(3)),
        "{done}"
    );
    assert_eq!(done["error"]["code"], "command_tempfail");
    assert_eq!(done["error"]["retryable"], true);
}

/// Any other exit is permanent: one attempt, the stderr tail in the error
/// (with the configured secret redacted), no effect.
#[test]
fn exit_1_fails_at_once_with_its_stderr() {
    let (server, done, _db) = run_one(r#"echo "no channel; token $NOTIFY_TOKEN" >&2; exit 1"#);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("failed"), Some(1)),
        "{done}"
    );
    let error = &done["error"];
    assert_eq!(
        support::code_and_retryable(error),
        (Some("command_failed"), Some(false))
    );
    assert_eq!(error["exit_code"], 1);
    assert_eq!(error["stderr"], "no channel; token ***\n");
    assert_eq!(
        effect_detail(&server, done["call_id"].as_str().unwrap()),
        None
    );
}
