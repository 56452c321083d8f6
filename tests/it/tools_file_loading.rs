//! The tools file as the real binary sees it: every mistake exits 2 at
//! start-up with one line naming the tool and the field (never a secret, and
//! before the database is touched); and `verify --tools` judges a database of
//! a server that ran real tools by that file.

use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::Counts;
use crate::support::Http;
use crate::support::{unique_name, Server, TempDb, SERVER_BIN};
use serde_json::{json, Value};
use std::process::{Command, Output};

const SECRET: &str = "file-SECRET-value-88";

fn start_with(tools: &ToolsFile, db: &TempDb) -> Output {
    Command::new(SERVER_BIN)
        .args([
            "--port",
            "0",
            "--db",
            db.path_str(),
            "--tools",
            tools.path_str(),
        ])
        .env("TOOLS_FILE_TEST_TOKEN", SECRET)
        .env_remove("TOOLS_FILE_TEST_UNSET")
        .output()
        .expect("run the server")
}

fn http(extra: Value) -> Value {
    let mut tool = json!({"kind": "http", "url": "http://127.0.0.1:9/x",
                          "headers": {"Authorization": "Bearer ${TOOLS_FILE_TEST_TOKEN}"}});
    for (k, v) in extra.as_object().unwrap() {
        tool[k] = v.clone();
    }
    tool
}

/// Each mistake: exit 2, one line on stderr naming the tool and the field,
/// no secret, no usage text, and no database created.
#[test]
fn every_mistake_exits_2_with_one_line_naming_tool_and_field() {
    let cases = [
        (
            json!({"refund": http(json!({"retries": 3}))}),
            "refund",
            "field retries",
        ),
        (json!({"refund": {"kind": "ftp"}}), "refund", "field kind"),
        (
            json!({"refund": http(json!({"url": "ftp://x"}))}),
            "refund",
            "field url",
        ),
        (
            json!({"refund": http(json!({"headers": {"X-Key": "${TOOLS_FILE_TEST_UNSET}"}}))}),
            "refund",
            "field headers.X-Key",
        ),
        (
            json!({"refund": http(json!({"max_attempts": 0}))}),
            "refund",
            "field max_attempts",
        ),
        (
            json!({"refund": http(json!({"input_schema": {"type": "objekt"}}))}),
            "refund",
            "field input_schema",
        ),
        (json!({"re fund": http(json!({}))}), "re fund", "field name"),
        (
            json!({"notify": {"kind": "command", "argv": ["/no/such/program"]}}),
            "notify",
            "field argv[0]",
        ),
        (
            json!({"refund": http(json!({"headers": {"Host": "${TOOLS_FILE_TEST_TOKEN}"}}))}),
            "refund",
            "field headers.Host",
        ),
        (
            json!({"charge": {"kind": "builtin", "url": "http://x"}}),
            "charge",
            "field url",
        ),
    ];
    for (tools, tool, field) in cases {
        let file = ToolsFile::write(&json!({ "tools": tools }));
        let db = TempDb::new("tools-file-mistake");
        let output = start_with(&file, &db);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{tools}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{tools}: {stderr}");
        assert!(
            stderr.contains(&format!("tool {tool:?}")),
            "{tools}: {stderr}"
        );
        assert!(stderr.contains(field), "{tools}: {stderr}");
        assert!(
            !stderr.contains(SECRET) && !stderr.contains("usage"),
            "{stderr}"
        );
        assert!(!db.path.exists(), "{tools}: the database was created");
    }
    let missing = TempDb::new("tools-file-missing");
    let output = Command::new(SERVER_BIN)
        .args([
            "--port",
            "0",
            "--db",
            missing.path_str(),
            "--tools",
            "/no/such/tools.json",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read it"));
}

/// A file two readers could take differently is refused at start-up (exit 2,
/// one line), never resolved by keeping the last: a tool named twice, or a
/// member repeated inside one tool.
#[test]
fn a_repeated_tool_or_member_exits_2_instead_of_last_one_wins() {
    for (text, name) in [
        (
            r#"{"tools": {"refund": {"kind": "builtin"}, "refund": {"kind": "builtin"}}}"#,
            "\"refund\" appears more than once",
        ),
        (
            r#"{"tools": {"charge": {"kind": "builtin", "kind": "http"}}}"#,
            "\"kind\" appears more than once",
        ),
    ] {
        let file = ToolsFile::write_text(text);
        let db = TempDb::new("tools-file-twice");
        let output = start_with(&file, &db);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(name), "{stderr}");
        assert!(!db.path.exists(), "the database was created");
    }
}

fn verify(db: &TempDb, tools: Option<&ToolsFile>) -> (Option<i32>, String) {
    let mut command = Command::new(SERVER_BIN);
    command.args(["verify", "--db", db.path_str()]);
    if let Some(tools) = tools {
        command.args(["--tools", tools.path_str()]);
    }
    // The file's ${NAME} need not be set where verify runs.
    let output = command
        .env_remove("TOOLS_FILE_TEST_TOKEN")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A server with an `http` tool, a capped built-in and a `command` tool: every
/// success of the real tools wrote an effect, and `verify --tools` with the
/// same file passes; without it, verify names them and asks for the file; and
/// a succeeded `http` call whose effect is deleted is caught.
#[test]
fn verify_with_the_tools_file_judges_real_tools() {
    let downstream = Downstream::start(&[]);
    let tools = ToolsFile::write(&json!({"tools": {
        "refund": {"kind": "http", "url": downstream.url("/r"),
                   "headers": {"Authorization": "Bearer ${TOOLS_FILE_TEST_TOKEN}"}},
        "notify": {"kind": "command", "argv": ["/bin/true"]},
        "charge": {"kind": "builtin", "max_concurrency": 2},
        "sleep": {"kind": "builtin"}
    }}));
    let db = TempDb::new("tools-file-verify");
    let mut server = Server::start_with_env(
        &db,
        &["--tools", tools.path_str()],
        &[("TOOLS_FILE_TEST_TOKEN", SECRET)],
    );
    for body in [
        json!({"tool": "refund", "args": {"amount": 1}}),
        json!({"tool": "notify", "args": {}}),
        json!({"tool": "charge", "args": {"amount": 2}}),
        json!({"tool": "sleep", "args": {"seconds": 0}}),
    ] {
        let (_, call) = server.post(&unique_name("v"), &body);
        let done = server.wait_terminal(call["call_id"].as_str().unwrap());
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    server.kill();
    assert_eq!(db.effects(), 3);

    let (code, report) = verify(&db, Some(&tools));
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("every succeeded call of 'charge', 'notify', 'refund' has its effect"),
        "{report}"
    );
    let (code, report) = verify(&db, None);
    assert_eq!(
        code,
        Some(2),
        "needs --tools for refund and notify: {report}"
    );
    assert!(report.is_empty(), "{report}");

    let conn = server.sql();
    conn.execute("DELETE FROM effects WHERE tool = 'refund'", [])
        .unwrap();
    drop(conn);
    let (code, report) = verify(&db, Some(&tools));
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("1 × succeeded_without_effect"), "{report}");
    let (code, _) = verify(&db, Some(&ToolsFile::write(&json!({"tools": {"x": {}}}))));
    assert_eq!(code, Some(2), "a tools file verify cannot read");
}
