//! The `command` executor with real processes: exit-status classification,
//! stdin and environment, the timeout that kills a whole process group even
//! when it ignores SIGTERM, the stdout cap, and secrets kept out of errors.
//! Scripts run as `/bin/sh -c '...'`, so no test writes an executable file.
//! Every run goes through the supervisor, as in the service (the real
//! binary's `__supervise`), so what is checked is what the service reports.

use idempotent_tool::temp::TempDir;
use idempotent_tool::tools::{
    supervisor, Outcome, RunContext, ToolError, ToolErrorCode, ToolRegistry,
};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const SECRET: &str = "tok-cmd-SECRET-77";

/// Command tools of this test process start under the real binary's
/// supervisor, as the service's do.
fn supervised() {
    supervisor::supervise_commands_with(crate::support::SERVER_BIN);
}

/// A registry with one `command` tool `notify` running `script` under `sh -c`.
fn registry(script: &str, entry: Value) -> ToolRegistry {
    supervised();
    let mut tool = json!({
        "kind": "command",
        "argv": ["/bin/sh", "-c", script],
        "env": {"CHANNEL": "ops", "SLACK_TOKEN": "${TEST_SLACK_TOKEN}"},
    });
    for (k, v) in entry.as_object().unwrap() {
        tool[k] = v.clone();
    }
    let vars = |name: &str| (name == "TEST_SLACK_TOKEN").then(|| SECRET.to_string());
    let file = json!({"tools": {"notify": tool}}).to_string();
    ToolRegistry::from_json("test-tools.json", &file, Path::new("/"), &vars)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn run(registry: &ToolRegistry, attempt: i64) -> Outcome {
    let args: Map<String, Value> = json!({"text": "deploy done"}).as_object().unwrap().clone();
    let ctx = RunContext {
        call_id: "c_cmd",
        effect_id: "e_cmd",
        attempt,
        tool: "notify",
        args: &args,
        stop: None,
    };
    let outcome = registry.get("notify").unwrap().run(&ctx);
    if let Outcome::Failed { error, .. } = &outcome {
        assert!(!error.to_json().to_string().contains(SECRET), "{error:?}");
    }
    outcome
}

fn failure(outcome: Outcome) -> ToolError {
    match outcome {
        Outcome::Failed { error, .. } => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn success(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Succeeded { result, effect } => {
            assert_eq!(effect.and_then(|e| e.detail), Some(json!({"exit_code": 0})));
            result
        }
        other => panic!("expected success, got {other:?}"),
    }
}

/// `name` inside `dir`, as the string a script line needs.
fn path_in(dir: &TempDir, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

#[test]
fn exit_0_succeeds_with_stdout_as_json_or_text() {
    assert_eq!(
        success(run(&registry(r#"echo '{"sent":true}'"#, json!({})), 1)),
        json!({"sent": true})
    );
    assert_eq!(
        success(run(&registry("echo sent", json!({})), 1)),
        json!({"stdout": "sent\n"})
    );
}

/// stdin is the call's JSON; the environment has the four variables and the
/// configured `env`.
#[test]
fn stdin_and_environment_are_as_documented() {
    let script = r#"printf '{"stdin":%s,"key":"%s","call":"%s","effect":"%s","attempt":"%s","channel":"%s"}' \
        "$(cat)" "$IDEMPOTENCY_KEY" "$CALL_ID" "$EFFECT_ID" "$ATTEMPT" "$CHANNEL""#;
    let result = success(run(&registry(script, json!({})), 3));
    assert_eq!(
        result,
        json!({
            "stdin": {"call_id": "c_cmd", "effect_id": "e_cmd", "attempt": 3, "tool": "notify",
                      "args": {"text": "deploy done"}},
            "key": "e_cmd", "call": "c_cmd", "effect": "e_cmd", "attempt": "3", "channel": "ops",
        })
    );
    let token = success(run(
        &registry(r#"printf '"%s"' "$SLACK_TOKEN""#, json!({})),
        1,
    ));
    assert_eq!(
        token,
        json!(SECRET),
        "the configured secret reaches the command"
    );
}

#[test]
fn exit_75_is_retryable_and_other_exits_are_permanent_with_stderr() {
    let tempfail = failure(run(
        &registry("echo 'try later' >&2; exit 75", json!({})),
        1,
    ));
    assert_eq!(
        (tempfail.code, tempfail.retryable, tempfail.exit_code),
        (ToolErrorCode::CommandTempfail, true, Some(75))
    );
    let failed = failure(run(
        &registry("echo 'bad channel' >&2; exit 1", json!({})),
        1,
    ));
    assert_eq!(
        (failed.code, failed.retryable, failed.exit_code),
        (ToolErrorCode::CommandFailed, false, Some(1))
    );
    assert_eq!(failed.stderr.as_deref(), Some("bad channel\n"));
    let killed = failure(run(&registry("kill -9 $$", json!({})), 1));
    assert_eq!(
        (killed.code, killed.retryable, killed.signal),
        (ToolErrorCode::CommandKilled, false, Some(9))
    );
}

/// Only the last 4 KiB of stderr are kept (the end says why), and a configured
/// secret the script prints is redacted.
#[test]
fn stderr_is_the_last_4_kib_and_redacted() {
    let script = r#"i=0; while [ $i -lt 2000 ]; do echo "noise line $i" >&2; i=$((i+1)); done
        echo "token $SLACK_TOKEN rejected" >&2; exit 2"#;
    let error = failure(run(&registry(script, json!({})), 1));
    let stderr = error.stderr.unwrap();
    assert!(
        stderr.len() <= 4096 && stderr.len() > 4000,
        "{}",
        stderr.len()
    );
    assert!(stderr.ends_with("token *** rejected\n"), "{stderr}");
}

/// The process's state from /proc: `None` once it is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// A script that ignores SIGTERM and starts a child that ignores it too: the
/// timeout still ends both (SIGKILL to the group), and counts as retryable.
#[test]
fn a_timeout_kills_the_group_even_when_it_ignores_sigterm() {
    let dir = TempDir::new("command-tool").unwrap();
    let pid_file = path_in(&dir, "grandchild.pid");
    let script = format!("trap '' TERM; sleep 30 & echo $! > {pid_file}; wait; wait");
    let started = Instant::now();
    let error = failure(run(&registry(&script, json!({"timeout_ms": 1000})), 1));
    let elapsed = started.elapsed();
    assert_eq!(
        (error.code, error.retryable),
        (ToolErrorCode::CommandTimeout, true)
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the script wrote its child's pid before the timeout")
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(process_state(pid), Some(state) if state != 'Z') {
        assert!(
            Instant::now() < deadline,
            "the grandchild {pid} survived the timeout"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Output past 1 MiB fails the attempt at once, without waiting for the
/// command (or its timeout) to end.
#[test]
fn stdout_over_one_mib_fails_the_attempt() {
    let started = Instant::now();
    let error = failure(run(&registry("yes", json!({"timeout_ms": 30000})), 1));
    assert_eq!(
        (error.code, error.retryable),
        (ToolErrorCode::CommandOutputTooLarge, false)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let exactly = success(run(
        &registry("head -c 1048576 /dev/zero | tr '\\0' a", json!({})),
        1,
    ));
    assert_eq!(exactly["stdout"].as_str().unwrap().len(), 1024 * 1024);
}

/// What the command leaves running dies with the run — in its group, or
/// out of it (`setsid`) — so a background child holding stdout open does
/// not hold the worker, and nothing outlives the attempt.
#[test]
fn stragglers_do_not_hold_the_run_or_outlive_it() {
    let dir = TempDir::new("command-tool").unwrap();
    let pid_file = path_in(&dir, "stragglers.pid");
    let script = format!(
        "sleep 30 & a=$!; setsid sleep 30 & echo $a $! > {pid_file}; echo '{{\"done\":1}}'"
    );
    let started = Instant::now();
    let result = success(run(&registry(&script, json!({"timeout_ms": 20000})), 1));
    assert_eq!(result, json!({"done": 1}));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let pids = std::fs::read_to_string(&pid_file).unwrap();
    for pid in pids.split_whitespace().map(|p| p.parse::<i32>().unwrap()) {
        assert!(
            matches!(process_state(pid), None | Some('Z')),
            "straggler {pid} outlived the run"
        );
    }
}

#[test]
fn a_command_that_cannot_start_is_a_permanent_failure() {
    let dir = TempDir::new("command-tool").unwrap();
    let script = path_in(&dir, "gone.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let file =
        json!({"tools": {"notify": {"kind": "command", "argv": [script.clone()]}}}).to_string();
    supervised();
    let tools = ToolRegistry::from_json("t.json", &file, Path::new("/"), &|_| None).unwrap();
    std::fs::remove_file(&script).unwrap();
    let args = Map::new();
    let ctx = RunContext {
        call_id: "c",
        effect_id: "e",
        attempt: 1,
        tool: "notify",
        args: &args,
        stop: None,
    };
    let error = failure(tools.get("notify").unwrap().run(&ctx));
    assert_eq!(
        (error.code, error.retryable),
        (ToolErrorCode::CommandSpawnFailed, false)
    );
    assert!(
        !error.message.contains(&script),
        "argv stays out of errors: {}",
        error.message
    );
}
