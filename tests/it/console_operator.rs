//! The operator's console, in a real browser against the real binary: a
//! failed call re-run from its page (same call id and effect id, then
//! succeeded); "all N matching" pending calls cancelled from the list as
//! one bulk job, its progress shown until done; the error filter, the error
//! column and the overview's failures by code over a range; a tool paused
//! from the Tools page, its calls shown waiting ("paused") and then run
//! after Resume; and every page's own parts — the list refreshing by
//! itself with its total and a pause toggle, the one time-zone choice
//! remembered, the console's own not-found page.

use crate::console::assert_same_origin;
use crate::support::browser::{browser, Browser};
use crate::support::{Http, Server, TempDb};
use serde_json::{json, Value};

fn id(call: &Value) -> String {
    call["call_id"].as_str().unwrap().to_string()
}

/// No error in the browser's console, and nothing loaded from elsewhere.
fn clean(browser: &Browser, server: &Server) {
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert_same_origin(browser, server);
}

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    server.request("POST", path, &[], Some(&body.to_string()))
}

#[test]
fn a_failed_call_is_rerun_from_its_page() {
    let db = TempDb::new("console-rerun");
    let server = Server::start(&db, &[]);
    let (_, call) = server.post(
        "once",
        &json!({"tool": "fail", "args": {"fail_times": 1, "retryable": false}}),
    );
    let failed = server.wait_terminal(&id(&call));
    assert_eq!(failed["status"], "failed");
    let browser = browser();
    browser.goto(&format!("{}/ui/calls/{}", server.base, id(&call)));
    browser.wait_text_containing("#call-status", "failed");
    assert_eq!(browser.count("#cancel-button"), 0);
    browser.click("#rerun-button");
    browser.wait_for("#rerun-dialog[open]");
    browser.type_into("#rerun-reason", "the card was topped up");
    browser.click("#rerun-confirm");
    browser.wait_text_containing("#call-status", "succeeded");
    browser.wait_text("[data-fact=attempt] dd", "2");
    browser.wait_for("li[data-event=rerun]");
    let rerun = browser.text("li[data-event=rerun]");
    assert!(rerun.contains("the card was topped up"), "{rerun}");
    let (_, now) = server.get(&format!("/v1/tool-calls/{}", id(&call)));
    assert_eq!(
        (now["status"].as_str(), &now["effect_id"]),
        (Some("succeeded"), &failed["effect_id"])
    );
    clean(&browser, &server);
}

#[test]
fn all_matching_pending_calls_are_cancelled_from_the_list_as_one_job() {
    let db = TempDb::new("console-bulk");
    let server = Server::start(&db, &[]);
    assert_eq!(post(&server, "/v1/tools/sleep/pause", &json!({})).0, 200);
    let ids: Vec<String> = (0..150)
        .map(|n| {
            id(&server
                .post(
                    &format!("w{n}"),
                    &json!({"tool": "sleep", "args": {"seconds": 1}}),
                )
                .1)
        })
        .collect();
    let (_, done) = server.post("done", &json!({"tool": "charge", "args": {"amount": 1}}));
    server.wait_terminal(&id(&done));
    let browser = browser();
    browser.goto(&format!(
        "{}/ui/calls?status=pending&tool=sleep&limit=20",
        server.base
    ));
    browser.wait_text("#total", "150 matching");
    assert_eq!(browser.count("tr[data-call-id] [data-wait=paused]"), 20);
    browser.click("#cancel-matching");
    browser.wait_for("#bulk-dialog[open]");
    let said = browser.text("#bulk-dialog");
    assert!(said.contains("150"), "{said}");
    browser.click("#bulk-dialog-confirm");
    browser.wait_text("#bulk-state", "done");
    browser.wait_text("#bulk-changed", "150");
    browser.wait_text("#total", "0 matching");
    for call_id in &ids {
        let (_, call) = server.get(&format!("/v1/tool-calls/{call_id}"));
        assert_eq!(call["status"], "cancelled", "{call}");
    }
    let (_, charge) = server.get(&format!("/v1/tool-calls/{}", id(&done)));
    assert_eq!(
        charge["status"], "succeeded",
        "outside the filter: untouched"
    );
    clean(&browser, &server);
}

#[test]
fn the_error_filter_column_and_the_overviews_failures_by_code() {
    let db = TempDb::new("console-errors");
    let server = Server::start(&db, &[]);
    let mut failed = Vec::new();
    for n in 0..2 {
        let (_, call) = server.post(
            &format!("f{n}"),
            &json!({"tool": "fail", "args": {"retryable": false}}),
        );
        failed.push(id(&server.wait_terminal(&id(&call))));
    }
    let (_, ok) = server.post("ok", &json!({"tool": "charge", "args": {"amount": 1}}));
    server.wait_terminal(&id(&ok));
    let browser = browser();
    browser.goto(&format!("{}/ui/calls", server.base));
    browser.wait("every call listed", || {
        browser.count("tr[data-call-id]") == 3
    });
    assert_eq!(browser.texts(".error-code"), ["tool_failed", "tool_failed"]);
    browser.type_into("#filters input[name=error_code]", "tool_failed");
    browser.click("#apply-filters");
    browser.wait("the filter in the address bar", || {
        browser.url().ends_with("/ui/calls?error_code=tool_failed")
    });
    failed.reverse();
    browser.wait("the failures alone", || {
        browser.attributes("tr[data-call-id]", "data-call-id") == failed
    });
    browser.wait_text("#total", "2 matching");
    browser.goto(&format!("{}/ui/?range=7d", server.base));
    browser.wait_text("#failures tr[data-code=tool_failed] td:nth-child(2)", "2");
    assert_eq!(
        browser.eval("return document.getElementById('range').value", vec![]),
        "7d"
    );
    browser.click("#failures tr[data-code=tool_failed] a");
    browser.wait("the list of that code", || {
        browser.url().contains("error_code=tool_failed")
    });
    clean(&browser, &server);
}

#[test]
fn a_tool_paused_from_the_tools_page_holds_its_calls_until_resumed() {
    let db = TempDb::new("console-pause");
    let server = Server::start(&db, &[]);
    let browser = browser();
    browser.goto(&format!("{}/ui/tools", server.base));
    browser.click(".tool[data-tool=charge] [data-action=pause]");
    browser.wait_for(".tool[data-tool=charge][data-paused=true]");
    let waiting: Vec<String> = (0..3)
        .map(|n| {
            let (status, call) = server.post(
                &format!("c{n}"),
                &json!({"tool": "charge", "args": {"amount": 1}}),
            );
            assert_eq!(
                (status, call["waiting_for"].as_str()),
                (202, Some("paused")),
                "{call}"
            );
            id(&call)
        })
        .collect();
    let (_, mail) = server.post(
        "mail",
        &json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": "s"}}),
    );
    server.wait_terminal(&id(&mail));
    browser.goto(&format!("{}/ui/calls?tool=charge", server.base));
    browser.wait("the three calls waiting, paused", || {
        browser.count("tr[data-status=pending] [data-wait=paused]") == 3
    });
    browser.goto(&format!("{}/ui/calls/{}", server.base, waiting[0]));
    browser.wait_text_containing("#waiting-for", "paused");
    browser.goto(&format!("{}/ui/tools", server.base));
    browser.click(".tool[data-tool=charge] [data-action=resume]");
    browser.wait_for(".tool[data-tool=charge][data-paused=false]");
    for call_id in &waiting {
        assert_eq!(server.wait_terminal(call_id)["status"], "succeeded");
    }
    browser.goto(&format!("{}/ui/calls?tool=charge", server.base));
    browser.wait("the three calls succeeded", || {
        browser.count("tr[data-status=succeeded]") == 3
    });
    clean(&browser, &server);
}

#[test]
fn pages_refresh_by_themselves_pause_and_tell_the_time_in_one_zone() {
    let db = TempDb::new("console-live");
    let server = Server::start(&db, &[]);
    let (_, first) = server.post("first", &json!({"tool": "charge", "args": {"amount": 1}}));
    server.wait_terminal(&id(&first));
    let browser = browser();
    browser.goto(&format!("{}/ui/calls", server.base));
    browser.wait_text("#total", "1 matching");
    server.post("second", &json!({"tool": "charge", "args": {"amount": 2}}));
    browser.wait_text("#total", "2 matching");
    browser.click("#pause-toggle");
    browser.wait_text_containing("#live-state", "paused");
    let (_, third) = server.post("third", &json!({"tool": "charge", "args": {"amount": 3}}));
    server.wait_terminal(&id(&third));
    // Paused: what it shows stays as read (a read in flight may land once).
    let shown = browser.text("#total");
    assert!(shown == "2 matching" || shown == "3 matching", "{shown}");
    browser.click("#pause-toggle");
    browser.wait_text("#total", "3 matching");

    browser.eval("document.getElementById('zone').value = 'utc'; document.getElementById('zone').dispatchEvent(new Event('change'));", vec![]);
    browser.wait_text("#zone-label", "UTC");
    browser.goto(&format!("{}/ui/calls/{}", server.base, id(&first)));
    browser.wait_for("#timeline li");
    let created = json_time(&server, &id(&first));
    let shown = browser.text("#timeline li time");
    assert_eq!(
        shown, created,
        "the audit's first time, in UTC, with its date, on the 24-hour clock"
    );
    browser.reload();
    browser.wait_text("#zone-label", "UTC");

    clean(&browser, &server);
    browser.goto(&format!("{}/ui/no-such-page", server.base));
    browser.wait_for("#not-found");
    assert_same_origin(&browser, &server);
}

/// The call's first audit time as the console shows it in UTC.
fn json_time(server: &Server, call_id: &str) -> String {
    let (_, audit) = server.get(&format!("/v1/tool-calls/{call_id}/audit"));
    let at = audit["events"][0]["at"].as_f64().unwrap();
    let ms = (at * 1000.0).floor() as u64;
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    // `2026-01-02T03:04:05.678Z` as the console writes it: `2026-01-02 03:04:05.678`.
    let text = idempotent_tool::rfc3339::rfc3339_millis(time);
    text.trim_end_matches('Z').replacen('T', " ", 1)
}
