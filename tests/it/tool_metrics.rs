//! The per-tool metric series follow the configured tools: every tool of a
//! `--tools` file (not only the four built-ins) has its zero series in
//! `/metrics` from start-up, before its first call, so a rate over a fresh
//! process is 0 rather than "no data".

use crate::support::downstream::ToolsFile;
use crate::support::exposition::{self, Exposition};
use crate::support::{Http, Server, TempDb};
use serde_json::json;

const RUNS: &str = "idempotent_tool_tool_runs_total";
const DURATION_COUNT: &str = "idempotent_tool_tool_run_duration_seconds_count";
const OUTCOMES: [&str; 3] = ["succeeded", "retryable_failure", "permanent_failure"];

fn scrape(server: &Server) -> Exposition {
    let response = server.call("GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    let text = String::from_utf8(response.body).unwrap();
    exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n--- scrape ---\n{text}"))
}

/// A tools file with an `http` and a `command` tool (and one built-in): each
/// has a zero run counter per outcome and an empty duration histogram before
/// any call; a built-in the file leaves out has none.
#[test]
fn a_tools_file_tool_has_zero_series_before_any_call() {
    let tools = ToolsFile::write(&json!({"tools": {
        "remote": {"kind": "http", "url": "http://127.0.0.1:9/never-called"},
        "notify": {"kind": "command", "argv": ["/bin/sh", "-c", "cat"]},
        "charge": {"kind": "builtin"}
    }}));
    let db = TempDb::new("tool-metrics");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let metrics = scrape(&server);
    for tool in ["remote", "notify", "charge"] {
        for outcome in OUTCOMES {
            let labels = [("tool", tool), ("outcome", outcome)];
            assert_eq!(
                metrics.value(RUNS, &labels),
                Some(0.0),
                "{RUNS} {labels:?}\n{}",
                server.stderr()
            );
        }
        assert_eq!(
            metrics.value(DURATION_COUNT, &[("tool", tool)]),
            Some(0.0),
            "{DURATION_COUNT} {tool}"
        );
    }
    assert_eq!(
        metrics.value(RUNS, &[("tool", "sleep"), ("outcome", "succeeded")]),
        None,
        "a built-in the tools file leaves out is not a configured tool"
    );
}
