//! The samples in `docs/` are what the binary prints, so they cannot drift
//! again: every `--version` line quoted is the binary's; the `verify` report
//! of docs/operations.md is, line for line, what `verify` prints after the
//! calls its text names; its invariant table names exactly the checks
//! `verify` runs; and docs/api.md's `GET /v1/tools` sample shows every
//! member a tool has.

use crate::support::openapi::ROOT;
use crate::support::{run_bounded, signal, Http, Local, Server, TempDb, SERVER_BIN};
use serde_json::json;
use std::collections::BTreeSet;

fn document(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{name}")).expect("a document")
}

/// README and every document in `docs/` (the journal's dated notes aside).
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(format!("{ROOT}/docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|name| {
            let text = document(&name);
            (name, text)
        })
        .collect()
}

/// The first ```text block after `marker` in `text`.
fn text_block_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let after = &text[text.find(marker).unwrap_or_else(|| panic!("{marker:?}"))..];
    let block = after.split("```text\n").nth(1).expect("a text block");
    block.split("```").next().unwrap()
}

#[test]
fn every_version_line_quoted_is_the_binarys() {
    let out = run_bounded(SERVER_BIN, &["--version"]);
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(version.contains("(writes SQLite schema"), "{version}");
    let mut quoted = 0;
    for (name, text) in documents() {
        for line in text.lines().filter(|l| l.contains("(writes SQLite schema")) {
            let start = line.find("idempotent-tool ").expect("the program's name");
            let end = start + line[start..].find(')').expect("the closing parenthesis") + 1;
            assert_eq!(&line[start..end], version, "{name}: {line}");
            quoted += 1;
        }
    }
    assert!(quoted >= 2, "the version lines were read");
}

/// The report docs/operations.md shows, after the calls its text names.
#[test]
fn the_verify_sample_is_what_verify_prints() {
    let db = TempDb::new("docs-verify-sample");
    let mut server = Server::start(&db, &[]);
    let charge = |n| json!({"tool": "charge", "args": {"amount": n}});
    let mail = |to: &str| json!({"tool": "send_email", "args": {"to": to}});
    let flaky = json!({"tool": "fail", "args": {"fail_times": 1, "retryable": true}});
    for (key, body, ends) in [
        ("readme-1", charge(100), "succeeded"),
        ("readme-2", charge(200), "succeeded"),
        ("mail-1", mail("a@example.com"), "succeeded"),
        ("mail-2", mail("b@example.com"), "succeeded"),
        ("flaky-1", flaky.clone(), "failed"),
        ("flaky-1", flaky, "succeeded"),
    ] {
        let (_, call) = server.post(key, &body);
        let done = server.wait_terminal(call["call_id"].as_str().unwrap());
        assert_eq!(done["status"], ends, "{key}: {done}");
    }
    signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));
    let out = run_bounded(SERVER_BIN, &["verify", "--db", db.path_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).replacen(db.path_str(), "idem.db", 1);
    let operations = document("docs/operations.md");
    let sample = text_block_after(
        &operations,
        "`verify` checks every invariant the service promises",
    );
    assert_eq!(printed, sample, "docs/operations.md's verify sample");
}

/// The invariant table of docs/operations.md names every check `verify`
/// runs (as `GET /v1/verify` lists them), and no other.
#[test]
fn the_invariant_table_names_every_check() {
    let db = TempDb::new("docs-invariants");
    let server = Local::start(&db, &[]);
    let (status, answer) = server.get("/v1/verify?timeout_s=30");
    assert_eq!(status, 200, "{answer}");
    let run: BTreeSet<String> = answer["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    let operations = document("docs/operations.md");
    let table = operations
        .split("| Invariant | Violation name |\n|---|---|\n")
        .nth(1)
        .expect("the invariant table");
    let listed: BTreeSet<String> = table
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let name = l.trim_end_matches(" |").rsplit(" | ").next().unwrap();
            name.trim_matches('`').to_string()
        })
        .collect();
    assert_eq!(listed, run, "docs/operations.md's invariant table");
}

/// docs/api.md's `GET /v1/tools` sample shows every member of a tool.
#[test]
fn the_tools_sample_shows_every_member() {
    let db = TempDb::new("docs-tools-sample");
    let server = Local::start(&db, &[]);
    let (status, answer) = server.get("/v1/tools");
    assert_eq!(status, 200, "{answer}");
    let api = document("docs/api.md");
    let sample = text_block_after(&api, "curl -sS http://127.0.0.1:8081/v1/tools");
    let tool = answer["tools"][0].as_object().expect("a tool");
    let missing: Vec<&String> = tool
        .keys()
        .filter(|member| !sample.contains(&format!("\"{member}\":")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/api.md's sample: {missing:?}\n{sample}"
    );
}
