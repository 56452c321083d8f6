//! The console's approval queue, in a real browser (headless Chromium over
//! WebDriver) against the real binary: a viewer sees the queue without its
//! tab or any button, and no cancel on a call's page; an approver sees each
//! waiting call's tool, key, wait, time left and arguments as text (markup
//! in them runs nothing), approves one with a reason after a confirmation —
//! and the API then shows it run, approved by that approver — and the
//! overview counts what still waits.

use crate::support::auth::sha256_hex;
use crate::support::browser::browser;
use crate::support::downstream::ToolsFile;
use crate::support::{AuthFile, Http, Server, TempDb};
use serde_json::{json, Value};

const CALLER: &str = "ui-acme-caller";
const VIEWER: &str = "ui-acme-bob";
const APPROVER: &str = "ui-acme-alice";

/// Would set `window.xss` if it ran.
const XSS_ARG: &str = "</pre><img src=x onerror=\"window.xss=1\">";

#[test]
fn an_approver_approves_in_the_queue_and_a_viewer_sees_no_button() {
    let auth = AuthFile::with_tenants(
        json!({"acme": {"token_sha256": sha256_hex(CALLER), "tokens": {
            "bob": {"token_sha256": sha256_hex(VIEWER), "role": "viewer"},
            "alice": {"token_sha256": sha256_hex(APPROVER), "role": "approver"},
        }}}),
        &[],
    );
    let tools = ToolsFile::write(&json!({"tools": {
        "charge": {"kind": "builtin", "approval": {"when": {"pointer": "/amount", "above": 100}}},
        "send_email": {"kind": "builtin", "approval": {"when": "always"}},
    }}));
    let db = TempDb::new("console-approvals");
    let server = Server::start(
        &db,
        &["--auth-file", auth.path_str(), "--tools", tools.path_str()],
    );
    let post = |key: &str, body: Value| {
        let bearer = format!("Bearer {CALLER}");
        let headers = [("Authorization", bearer.as_str()), ("Idempotency-Key", key)];
        let (status, call) =
            server.request("POST", "/v1/tool-calls", &headers, Some(&body.to_string()));
        assert_eq!(
            (status, call["status"].as_str()),
            (202, Some("awaiting_approval")),
            "{call}"
        );
        call["call_id"].as_str().unwrap().to_string()
    };
    let charge = post(
        "big-charge",
        json!({"tool": "charge", "args": {"amount": 4321}}),
    );
    let email = post(
        "odd-email",
        json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": XSS_ARG, "body": "b"}}),
    );
    let browser = browser();
    let sign_in = |token: &str| {
        browser.wait_for("#token-input");
        browser.type_into("#token-input", token);
        browser.click("#sign-in button[type=submit]");
    };

    // A viewer: the queue reads, but no tab, no button, no cancel.
    browser.goto(&format!("{}/ui/approvals", server.base));
    sign_in(VIEWER);
    browser.wait_text("#token-role", "viewer");
    browser.wait("two waiting calls", || {
        browser.count("article.approval") == 2
    });
    assert_eq!(browser.count("button.approve, button.deny"), 0);
    assert_eq!(browser.count("[data-tab=approvals]:not([hidden])"), 0);
    browser.goto(&format!("{}/ui/calls/{charge}", server.base));
    browser.wait_text_containing("#call-status", "awaiting_approval");
    browser.wait_for("[data-fact=approval]");
    assert_eq!(browser.count("#cancel-button"), 0, "a viewer cannot cancel");

    // An approver: the tab, the arguments as text, and the buttons.
    browser.click("#sign-out");
    sign_in(APPROVER);
    browser.wait_text("#token-role", "approver");
    browser.click("[data-tab=approvals]");
    let card = format!("article.approval[data-call-id='{charge}']");
    browser.wait_for(&card);
    let text = browser.text(&format!("{card} pre.args"));
    assert!(text.contains("\"amount\": 4321"), "{text}");
    assert!(browser.text(&format!("{card} .time-left")).contains("left"));
    let odd = browser.text(&format!(
        "article.approval[data-call-id='{email}'] pre.args"
    ));
    assert!(odd.contains("onerror"), "markup shown as text: {odd}");
    assert_eq!(
        browser.eval("return window.xss === undefined", vec![]),
        true
    );
    assert_eq!(browser.count("main img"), 0, "no element came from data");

    browser.click(&format!("{card} button.approve"));
    browser.wait_for("#decision-dialog");
    browser.type_into("#decision-reason", "invoice checked");
    browser.click("#decision-confirm");
    browser.wait_text_containing("#approval-message", "Approved");
    let bearer = format!("Bearer {CALLER}");
    let mut call = Value::Null;
    browser.wait("the approved charge to run", || {
        call = server
            .request(
                "GET",
                &format!("/v1/tool-calls/{charge}"),
                &[("Authorization", &bearer)],
                None,
            )
            .1;
        call["status"] == "succeeded"
    });
    let (_, approval) = server.request(
        "GET",
        &format!("/v1/tool-calls/{charge}/approval"),
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(approval["decision"]["by"], "alice@acme");
    assert_eq!(approval["decision"]["reason"], "invoice checked");
    browser.wait("one card left", || browser.count("article.approval") == 1);

    // The overview counts what still waits; the call page shows the decision.
    browser.click("[data-tab=overview]");
    browser.wait_text("#count-awaiting", "1");
    browser.goto(&format!("{}/ui/calls/{charge}", server.base));
    browser.wait_text_containing("[data-fact=approval]", "approved by alice@acme");
    browser.wait_for("#timeline li[data-event=approved]");
    // The sign-in's own probes answer 401 before a token is given; nothing else.
    let errors: Vec<String> = browser
        .console_errors()
        .into_iter()
        .filter(|e| {
            !e.contains(
                "/v1/overview - Failed to load resource: the server responded with a status of 401",
            )
        })
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
