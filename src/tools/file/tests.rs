//! Unit tests of the tools file: every mistake is one line naming the tool and
//! the field, and no secret reaches a message or a `Debug`.

use super::*;
use crate::tools::Outcome;
use serde_json::json;

const SECRET: &str = "tok-SECRET-value-1";

fn vars(name: &str) -> Option<String> {
    match name {
        "PAYMENTS_TOKEN" => Some(SECRET.to_string()),
        "WITH_NEWLINE" => Some(format!("{SECRET}\r\nX-Injected: 1")),
        "EMPTY" => Some(String::new()),
        "PATH" => Some("/nonexistent:/usr/bin:/bin".to_string()),
        _ => None,
    }
}

fn load_in(dir: &Path, file: &Value) -> Result<ToolRegistry, ToolFileError> {
    ToolRegistry::from_json("tools.json", &file.to_string(), dir, &vars)
}

fn load(file: &Value) -> Result<ToolRegistry, ToolFileError> {
    load_in(Path::new("/"), file)
}

fn one(name: &str, entry: Value) -> Value {
    json!({"tools": {name: entry}})
}

fn http(extra: Value) -> Value {
    let mut entry = json!({"kind": "http", "url": "http://127.0.0.1:9/refunds"});
    for (k, v) in extra.as_object().unwrap() {
        entry[k] = v.clone();
    }
    entry
}

fn command(extra: Value) -> Value {
    let mut entry = json!({"kind": "command", "argv": ["/bin/sh", "-c", "cat"]});
    for (k, v) in extra.as_object().unwrap() {
        entry[k] = v.clone();
    }
    entry
}

/// The mistake, checked to be one line, secret-free, and to name what it says.
fn mistake(file: Value) -> ToolFileError {
    let error = load(&file).expect_err("the file should be refused");
    let line = error.to_string();
    assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
    assert!(
        !line.contains(SECRET) && !format!("{error:?}").contains(SECRET),
        "{line}"
    );
    assert!(line.starts_with("tools file tools.json: "), "{line}");
    error
}

fn assert_mistake(file: Value, tool: Option<&str>, field: Option<&str>, needle: &str) {
    let error = mistake(file);
    assert_eq!(error.tool.as_deref(), tool, "{error}");
    assert_eq!(error.field.as_deref(), field, "{error}");
    assert!(error.message.contains(needle), "{error} lacks {needle:?}");
}

#[test]
fn the_issue_example_loads_with_its_defaults() {
    let registry = load(&json!({"tools": {
        "refund": {"kind": "http", "url": "https://payments.internal/v1/refunds",
                   "headers": {"Authorization": "Bearer ${PAYMENTS_TOKEN}"},
                   "timeout_ms": 10000, "max_attempts": 5,
                   "backoff_ms": {"initial": 200, "max": 30000},
                   "max_concurrency": 4,
                   "input_schema": {"type": "object", "required": ["amount"],
                                    "properties": {"amount": {"type": "integer", "minimum": 1}},
                                    "additionalProperties": false}},
        "notify": {"kind": "command", "argv": ["sh", "-c", "cat"], "env": {"SLACK_TOKEN": "${PAYMENTS_TOKEN}"},
                   "timeout_ms": 5000},
        "charge": {"kind": "builtin"}
    }}))
    .unwrap();
    let names: Vec<&str> = registry.specs().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["charge", "notify", "refund"]);
    let refund = registry.get("refund").unwrap();
    assert_eq!(
        (refund.kind, refund.max_attempts, refund.max_concurrency),
        (Kind::Http, 5, Some(4))
    );
    assert_eq!(refund.timeout, Duration::from_secs(10));
    let notify = registry.get("notify").unwrap();
    assert_eq!(
        (notify.max_attempts, notify.max_concurrency),
        (DEFAULT_MAX_ATTEMPTS, None)
    );
    assert_eq!(registry.get("charge").unwrap().max_attempts, 1);
    assert!(
        registry.get("sleep").is_none(),
        "with a file, exactly the listed tools exist"
    );
    let args = json!({"amount": 0});
    let refused = registry
        .prepare("refund", args.as_object().unwrap())
        .unwrap_err()
        .to_string();
    assert!(refused.starts_with("args.amount: "), "{refused}");
    let debug = format!("{registry:?}");
    assert!(
        !debug.contains(SECRET) && !debug.contains("payments.internal"),
        "{debug}"
    );
    let view = registry.public_view().to_string();
    assert!(
        !view.contains(SECRET) && !view.contains("payments.internal") && !view.contains("SLACK"),
        "{view}"
    );
}

#[test]
fn file_level_mistakes_name_the_file() {
    let error =
        ToolRegistry::from_json("tools.json", "{\"tools\": ", Path::new("/"), &vars).unwrap_err();
    assert!(error.to_string().contains("is not valid JSON"), "{error}");
    assert_mistake(json!([]), None, None, "must be a JSON object");
    assert_mistake(
        json!({"tools": {}, "extra": 1}),
        None,
        Some("extra"),
        "top-level",
    );
    assert_mistake(json!({"tools": {}}), None, Some("tools"), "no tool");
    assert_mistake(json!({"tools": []}), None, Some("tools"), "object");
}

#[test]
fn names_and_kinds_are_checked() {
    assert_mistake(
        one("bad name", json!({"kind": "builtin"})),
        Some("bad name"),
        Some("name"),
        "1-64",
    );
    assert_mistake(
        one(&"x".repeat(65), json!({"kind": "builtin"})),
        Some(&"x".repeat(65)),
        Some("name"),
        "1-64",
    );
    assert_mistake(
        one("refund", json!("http")),
        Some("refund"),
        None,
        "must be an object",
    );
    assert_mistake(
        one("refund", json!({})),
        Some("refund"),
        Some("kind"),
        "required",
    );
    assert_mistake(
        one("refund", json!({"kind": "ftp"})),
        Some("refund"),
        Some("kind"),
        "\"ftp\" is not a kind",
    );
    assert_mistake(
        one("refund", json!({"kind": "builtin"})),
        Some("refund"),
        Some("kind"),
        "no built-in",
    );
    assert_mistake(
        one("refund", http(json!({"max_atempts": 2}))),
        Some("refund"),
        Some("max_atempts"),
        "is not a field for kind \"http\"",
    );
    assert_mistake(
        one("charge", json!({"kind": "builtin", "input_schema": {}})),
        Some("charge"),
        Some("input_schema"),
        "not a field for kind \"builtin\"",
    );
    assert_mistake(
        one("notify", command(json!({"url": "http://x/"}))),
        Some("notify"),
        Some("url"),
        "kind \"command\"",
    );
}

#[test]
fn numbers_are_bounded() {
    for (field, value) in [
        ("max_attempts", json!(0)),
        ("max_attempts", json!(101)),
        ("max_attempts", json!("3")),
        ("max_attempts", json!(2.5)),
        ("timeout_ms", json!(0)),
        ("max_concurrency", json!(0)),
        ("max_concurrency", json!(-1)),
    ] {
        assert_mistake(
            one("refund", http(json!({field: value}))),
            Some("refund"),
            Some(field),
            "integer from",
        );
    }
    assert_mistake(
        one("charge", json!({"kind": "builtin", "max_attempts": 0})),
        Some("charge"),
        Some("max_attempts"),
        "from 1",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"backoff_ms": {"initial": 500, "max": 100}})),
        ),
        Some("refund"),
        Some("backoff_ms.max"),
        "initial",
    );
    assert_mistake(
        one("refund", http(json!({"backoff_ms": {"first": 5}}))),
        Some("refund"),
        Some("backoff_ms.first"),
        "not a field",
    );
    assert_mistake(
        one("refund", http(json!({"backoff_ms": {"initial": 0}}))),
        Some("refund"),
        Some("backoff_ms.initial"),
        "integer",
    );
    assert_mistake(
        one("refund", http(json!({"backoff_ms": 5}))),
        Some("refund"),
        Some("backoff_ms"),
        "object",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"backoff_ms": {"initial": 500}, "retry_after_max_ms": 100})),
        ),
        Some("refund"),
        Some("retry_after_max_ms"),
        "not be less than backoff_ms.initial",
    );
    assert_mistake(
        one("refund", http(json!({"retry_after_max_ms": 0}))),
        Some("refund"),
        Some("retry_after_max_ms"),
        "integer from 1",
    );
    assert_mistake(
        one(
            "notify",
            json!({"kind": "command", "argv": ["sh"], "retry_after_max_ms": 1000}),
        ),
        Some("notify"),
        Some("retry_after_max_ms"),
        "",
    );
    let capped = load(&one(
        "refund",
        http(json!({"backoff_ms": {"max": 1000}, "retry_after_max_ms": 600000})),
    ))
    .unwrap();
    let backoff = capped.get("refund").unwrap().backoff;
    assert_eq!(
        (backoff.max, backoff.retry_after_cap()),
        (Duration::from_secs(1), Duration::from_secs(600))
    );
    let by_default = load(&one("refund", http(json!({"backoff_ms": {"max": 1000}})))).unwrap();
    assert_eq!(
        by_default.get("refund").unwrap().backoff.retry_after_cap(),
        Duration::from_secs(1),
        "backoff_ms.max caps Retry-After when retry_after_max_ms is not given"
    );
    let ok = load(&one(
        "fail",
        json!({"kind": "builtin", "max_attempts": 4, "backoff_ms": {"initial": 10}}),
    ))
    .unwrap();
    let fail = ok.get("fail").unwrap();
    assert_eq!(
        (fail.max_attempts, fail.backoff.initial),
        (4, Duration::from_millis(10))
    );
}

#[test]
fn http_fields_are_checked() {
    let missing_url = json!({"kind": "http"});
    assert_mistake(
        one("refund", missing_url),
        Some("refund"),
        Some("url"),
        "required",
    );
    assert_mistake(
        one("refund", http(json!({"url": "ftp://h/x"}))),
        Some("refund"),
        Some("url"),
        "http://",
    );
    assert_mistake(
        one("refund", http(json!({"url": "https://u:p@h/x"}))),
        Some("refund"),
        Some("url"),
        "credentials",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"headers": {"Authorization": "Bearer ${MISSING_TOKEN}"}})),
        ),
        Some("refund"),
        Some("headers.Authorization"),
        "MISSING_TOKEN is not set",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"headers": {"Authorization": "${EMPTY}"}})),
        ),
        Some("refund"),
        Some("headers.Authorization"),
        "EMPTY is not set (or is empty)",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"headers": {"Authorization": "Bearer ${PAYMENTS_TOKEN"}})),
        ),
        Some("refund"),
        Some("headers.Authorization"),
        "closing }",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"headers": {"X-Token": "${WITH_NEWLINE}"}})),
        ),
        Some("refund"),
        Some("headers.X-Token"),
        "control character",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"headers": {"Idempotency-Key": "mine"}})),
        ),
        Some("refund"),
        Some("headers.Idempotency-Key"),
        "set by the server",
    );
    assert_mistake(
        one("refund", http(json!({"headers": {"Bad Header": "x"}}))),
        Some("refund"),
        Some("headers.Bad Header"),
        "not a valid header name",
    );
    assert_mistake(
        one("refund", http(json!({"headers": {"X-A": 1}}))),
        Some("refund"),
        Some("headers.X-A"),
        "string",
    );
    assert_mistake(
        one("refund", http(json!({"ca_file": "ca.pem"}))),
        Some("refund"),
        Some("ca_file"),
        "https://",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"url": "https://h/x", "ca_file": "no-such-ca.pem"})),
        ),
        Some("refund"),
        Some("ca_file"),
        "/no-such-ca.pem",
    );
}

#[test]
fn schemas_are_compiled_at_load() {
    assert_mistake(
        one("refund", http(json!({"input_schema": {"type": "objekt"}}))),
        Some("refund"),
        Some("input_schema"),
        "objekt",
    );
    assert_mistake(
        one(
            "refund",
            http(json!({"input_schema": {"$schema": "http://json-schema.org/draft-07/schema#"}})),
        ),
        Some("refund"),
        Some("input_schema"),
        "2020-12",
    );
}

#[test]
fn command_fields_are_checked() {
    assert_mistake(
        one("notify", json!({"kind": "command"})),
        Some("notify"),
        Some("argv"),
        "non-empty array",
    );
    assert_mistake(
        one("notify", command(json!({"argv": []}))),
        Some("notify"),
        Some("argv"),
        "non-empty",
    );
    assert_mistake(
        one("notify", command(json!({"argv": ["/bin/sh", 1]}))),
        Some("notify"),
        Some("argv[1]"),
        "string",
    );
    assert_mistake(
        one("notify", command(json!({"argv": [""]}))),
        Some("notify"),
        Some("argv[0]"),
        "name a program",
    );
    assert_mistake(
        one("notify", command(json!({"argv": ["./missing.sh"]}))),
        Some("notify"),
        Some("argv[0]"),
        "/missing.sh is not an executable file",
    );
    assert_mistake(
        one("notify", command(json!({"argv": ["no-such-program-xyz"]}))),
        Some("notify"),
        Some("argv[0]"),
        "not an executable found in PATH",
    );
    assert_mistake(
        one("notify", command(json!({"env": {"IDEMPOTENCY_KEY": "x"}}))),
        Some("notify"),
        Some("env.IDEMPOTENCY_KEY"),
        "set by the server",
    );
    assert_mistake(
        one("notify", command(json!({"env": {"1X": "x"}}))),
        Some("notify"),
        Some("env.1X"),
        "variable name",
    );
    assert_mistake(
        one(
            "notify",
            command(json!({"env": {"SLACK_TOKEN": "${SLACK_TOKEN}"}})),
        ),
        Some("notify"),
        Some("env.SLACK_TOKEN"),
        "SLACK_TOKEN is not set",
    );
    assert_mistake(
        one("notify", command(json!({"env": []}))),
        Some("notify"),
        Some("env"),
        "object of strings",
    );
}

/// `argv[0]` with a `/` is relative to the tools file's folder, not the
/// server's working directory.
#[test]
fn relative_argv0_resolves_against_the_files_folder() {
    let temp = crate::temp::TempDir::new("tools-file-test").unwrap();
    let dir = temp.path();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let script = dir.join("bin/echo-json.sh");
    std::fs::write(&script, "#!/bin/sh\necho '{\"ok\":true}'\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = one("notify", command(json!({"argv": ["./bin/echo-json.sh"]})));
    let registry = load_in(dir, &file).unwrap();
    let elsewhere = load_in(Path::new("/"), &file);
    let args = Map::new();
    let ctx = crate::tools::RunContext {
        call_id: "c",
        effect_id: "e",
        attempt: 1,
        tool: "notify",
        args: &args,
        stop: None,
    };
    // A fork elsewhere in this test process may still hold the just-written
    // file open (ETXTBSY, a retryable spawn failure): try again then.
    let spec = registry.get("notify").unwrap();
    let outcome = (0..20)
        .map(|_| spec.run(&ctx))
        .find(|outcome| !outcome.is_retryable_failure())
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: json!({"ok": true}),
            effect: Some(crate::tools::Effect {
                amount: None,
                detail: Some(json!({"exit_code": 0}))
            }),
        }
    );
    let error = elsewhere.unwrap_err();
    assert_eq!(error.field.as_deref(), Some("argv[0]"));
    assert!(error.message.contains("/bin/echo-json.sh"), "{error}");
}

/// `load` reads the real environment and the real file.
#[test]
fn load_reads_a_file_and_names_it() {
    let temp = crate::temp::TempDir::new("tools-load-test").unwrap();
    let path = temp.join("tools.json");
    std::fs::write(
        &path,
        one("charge", json!({"kind": "builtin", "max_attempts": 2})).to_string(),
    )
    .unwrap();
    let loaded = ToolRegistry::load(&path);
    assert_eq!(loaded.unwrap().get("charge").unwrap().max_attempts, 2);
    let missing = ToolRegistry::load(Path::new("/nonexistent/tools.json")).unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("tools file /nonexistent/tools.json: cannot read it"),
        "{missing}"
    );
}

/// A file that could be read two ways is refused, never resolved by keeping
/// the last member: a tool named twice, or a member repeated inside a tool.
#[test]
fn a_repeated_tool_or_member_is_refused_not_last_one_wins() {
    let twice = r#"{"tools": {"refund": {"kind": "builtin"}, "refund": {"kind": "http", "url": "http://127.0.0.1:9/x"}}}"#;
    let kind_twice = r#"{"tools": {"charge": {"kind": "builtin", "kind": "http"}}}"#;
    for (text, name) in [(twice, "refund"), (kind_twice, "kind")] {
        let error = ToolRegistry::from_json("tools.json", text, Path::new("/"), &vars)
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than once"), "{text}: {error}");
        assert!(error.contains(name), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        let dir = crate::temp::TempDir::new("tools-twice").unwrap();
        let path = dir.join("tools.json");
        std::fs::write(&path, text).unwrap();
        let error = effect_tools(&path).unwrap_err().to_string();
        assert!(error.contains("more than once"), "verify --tools: {error}");
    }
}
