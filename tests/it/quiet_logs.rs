//! A green `cargo test` shows no service logs, and a red test shows its own:
//! a service in a test process logs through libtest's output capture
//! (`log::capture_for_tests`, set when a test makes a temp database). Each
//! check runs one test of this very binary as a child and reads what the
//! child printed.

use crate::support::{Http, Local, TempDb};
use std::process::{Command, Output};

/// Run this test binary with `args` (a filter and libtest's flags), with
/// output capture as `cargo test` has it.
fn run_this_binary(args: &[&str]) -> Output {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(args)
        .env_remove("RUST_TEST_NOCAPTURE")
        .output()
        .expect("run the test binary")
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A passing test that runs a service (migrations, requests, access lines)
/// prints nothing of it.
#[test]
fn a_passing_test_prints_none_of_its_service_logs() {
    let test = "routes::every_json_body_ends_with_a_newline";
    let output = run_this_binary(&["--exact", test, "--test-threads", "1"]);
    let text = printed(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the test ran: {text}");
    assert!(!text.contains("\"ts\":"), "service logs leaked:\n{text}");
}

/// A failing test shows what its service said.
#[test]
fn a_failing_test_shows_its_service_logs() {
    let test = "quiet_logs::fixture_a_failing_test_with_a_service";
    let output = run_this_binary(&["--exact", test, "--ignored", "--test-threads", "1"]);
    let text = printed(&output);
    assert!(!output.status.success(), "the fixture fails: {text}");
    assert!(
        text.contains("\"msg\":\"schema migration applied\""),
        "its service's log is shown:\n{text}"
    );
}

/// Not a check: the failing test `a_failing_test_shows_its_service_logs`
/// runs as a child (ignored otherwise, so a green run stays green).
#[test]
#[ignore = "a fixture that fails on purpose; run by a_failing_test_shows_its_service_logs"]
fn fixture_a_failing_test_with_a_service() {
    let db = TempDb::new("quiet-fixture");
    let server = Local::start(&db, &[]);
    let (status, _) = server.get("/healthz");
    panic!("fails on purpose after a service logged (healthz {status})");
}
