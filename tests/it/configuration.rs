//! The configuration of the real binary from its environment: every flag has
//! an `IDEMPOTENT_TOOL_*` variable and a flag given wins (with one warning
//! naming both, and `--print-config` saying so); `_FILE` variables
//! read values from files; `--print-config` shows each value and where it
//! came from with the password masked; a variable that names no flag is
//! refused; and no `command` tool inherits the variables.

use crate::support::downstream::ToolsFile;
use crate::support::{
    address_after, print_config, unique_name, Http, Proc, Server, TempDb, SERVER_BIN,
};
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::process::Command;

#[test]
fn variables_configure_the_service_flags_win_and_command_tools_do_not_inherit_them() {
    let dir = TempDir::new("config-env").unwrap();
    let elsewhere = dir.path().join("elsewhere.db");
    let db_file = dir.path().join("db-path");
    std::fs::write(&db_file, format!("{}\n", elsewhere.display())).unwrap();
    let tools = ToolsFile::write(&json!({"tools": {"probe": {
        "kind": "command",
        "argv": ["/bin/sh", "-c",
                 "if env | grep -q '^IDEMPOTENT_TOOL_'; then echo inherited; else echo clean; fi"],
        "timeout_ms": 10000
    }}}));
    let db = TempDb::new("config-env");
    // --port and --db on the command line win over their variables.
    let args = [
        "--port",
        "0",
        "--db",
        db.path_str(),
        "--tools",
        tools.path_str(),
    ];
    let variables = [
        ("IDEMPOTENT_TOOL_WORKERS", "3"),
        ("IDEMPOTENT_TOOL_PORT", "1"),
        ("IDEMPOTENT_TOOL_DB_FILE", db_file.to_str().unwrap()),
        ("IDEMPOTENT_TOOL_ACCESS_LOG", "off"),
    ];
    let marker = "listening on http://";
    let (proc, banner) = Proc::start_with_env("server", SERVER_BIN, &args, &variables, marker);
    let server = Server {
        proc,
        base: format!("http://{}", address_after(&banner, marker)),
        db: db.path.clone(),
    };
    assert!(banner.contains("workers 3"), "{banner}");
    assert!(!server.base.ends_with(":1"), "{}", server.base);
    assert!(banner.contains(db.path_str()), "{banner}");
    assert!(!elsewhere.exists(), "IDEMPOTENT_TOOL_DB_FILE won over --db");
    let (status, call) = server.post(&unique_name("probe"), &json!({"tool": "probe", "args": {}}));
    assert_eq!(status, 202, "{call}");
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(done["result"]["stdout"], "clean\n", "{done}");
    assert!(
        !server.stderr().contains("\"method\""),
        "IDEMPOTENT_TOOL_ACCESS_LOG=off ignored"
    );
    // Each flag given over a variable that was set is said once, by name:
    // never the variable's value (here a file's path; it may be a secret).
    let stderr = server.stderr();
    let mut warned: Vec<(String, String)> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["event"] == "variable_overridden")
        .map(|l| {
            assert_eq!(l["level"], "warn", "{l}");
            let name = |field: &str| l[field].as_str().unwrap_or_default().to_string();
            (name("flag"), name("variable"))
        })
        .collect();
    warned.sort();
    assert_eq!(
        warned,
        [
            ("--db".to_string(), "IDEMPOTENT_TOOL_DB_FILE".to_string()),
            ("--port".to_string(), "IDEMPOTENT_TOOL_PORT".to_string())
        ],
        "{stderr}"
    );
    assert!(!stderr.contains(db_file.to_str().unwrap()), "{stderr}");
}

#[test]
fn print_config_names_each_origin_and_masks_the_password() {
    let dir = TempDir::new("config-print").unwrap();
    let url_file = dir.path().join("db-url");
    std::fs::write(
        &url_file,
        "postgres://idem:pg-s3cret@db.example:5433/idem\n",
    )
    .unwrap();
    let printed = print_config(
        &["--trusted-proxy", "127.0.0.1", "--workers", "2"],
        &[
            ("IDEMPOTENT_TOOL_DB_FILE", url_file.as_os_str()),
            ("IDEMPOTENT_TOOL_LOG_LEVEL", "debug".as_ref()),
            ("IDEMPOTENT_TOOL_WORKERS", "7".as_ref()),
        ],
    );
    assert!(!printed.contains("pg-s3cret"), "{printed}");
    let row = |flag: &str| -> Vec<String> {
        let line = printed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(flag))
            .unwrap_or_else(|| panic!("{flag} in {printed}"));
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("--db"),
        [
            "postgres://idem:***@db.example:5433/idem".to_string(),
            "IDEMPOTENT_TOOL_DB_FILE".to_string(),
            format!("({})", url_file.display())
        ]
    );
    assert_eq!(row("--log-level"), ["debug", "IDEMPOTENT_TOOL_LOG_LEVEL"]);
    assert_eq!(row("--trusted-proxy"), ["127.0.0.1/32", "command", "line"]);
    assert_eq!(row("--port"), ["8081", "default"]);
    assert_eq!(
        row("--workers"),
        [
            "2",
            "command",
            "line",
            "(IDEMPOTENT_TOOL_WORKERS",
            "ignored)"
        ]
    );
}

#[test]
fn a_variable_that_names_no_flag_is_refused_in_one_line() {
    let out = Command::new(SERVER_BIN)
        .env("IDEMPOTENT_TOOL_PROT", "9000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("IDEMPOTENT_TOOL_PROT names no flag"),
        "{said}"
    );
}
