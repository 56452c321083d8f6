//! The web console at `/ui`, in a real browser (headless Chromium over
//! WebDriver, `support::browser`) against the real binary: the overview's
//! counts are `/stats`'; a status filter shows exactly the matching calls
//! and survives a reload; the search box finds a call by id, key and effect
//! id; a call's page shows its audit timeline and a running call's last
//! progress, and cancelling a pending call
//! there makes the API answer `cancelled`; a wrong token shows nothing; a
//! tenant never sees another's call, an admin sees every tenant's with its
//! name; keys and args holding markup are shown as text and run nothing;
//! the browser's console has no error, no request leaves the service's
//! origin, every `/ui` answer carries the CSP; and at phone width (390 px)
//! no page scrolls sideways.

use crate::support::browser::{browser, Browser, LAPTOP};
use crate::support::downstream::ToolsFile;
use crate::support::{charge, eventually, AuthFile, Http, Server, TempDb};
use idempotent_tool::console::SECURITY_HEADERS;
use serde_json::{json, Value};

/// Markup in a key and in args: shown as text, it runs nothing (each would
/// set `window.xss` if it ran).
const XSS_KEY: &str = "<img/src=x/onerror=window.xss=1>";
const XSS_ARG: &str = "</script><script>window.xss=2</script><img src=x onerror=\"window.xss=3\">";

/// A call made and run to its end; its id.
fn settled(server: &impl Http, key: &str, body: &Value) -> String {
    let (status, call) = server.post(key, body);
    assert!(status == 200 || status == 202, "{call}");
    let id = call["call_id"].as_str().unwrap().to_string();
    server.wait_terminal(&id);
    id
}

/// Three charges that succeed and one call that fails.
fn a_mix(server: &impl Http) -> (Vec<String>, String) {
    let ok = (1..=3)
        .map(|i| settled(server, &format!("mix-ok-{i}"), &charge(100 * i)))
        .collect();
    let failed = settled(
        server,
        "mix-failed",
        &json!({"tool": "fail", "args": {"fail_times": 5}}),
    );
    (ok, failed)
}

/// No error in the browser's console, and every resource the page loaded
/// came from the service's own origin.
fn assert_clean_and_same_origin(browser: &Browser, server: &Server) {
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert_same_origin(browser, server);
}

/// Every resource the page loaded came from the service's own origin.
pub(crate) fn assert_same_origin(browser: &Browser, server: &Server) {
    let foreign: Vec<String> = browser
        .resources()
        .into_iter()
        .filter(|url| !url.starts_with(&format!("{}/", server.base)))
        .collect();
    assert!(
        foreign.is_empty(),
        "requests that left the origin: {foreign:?}"
    );
}

/// The page does not scroll sideways.
fn assert_no_horizontal_overflow(browser: &Browser, page: &str) {
    let widths = browser.eval(
        "return [document.documentElement.scrollWidth, window.innerWidth];",
        vec![],
    );
    let (scroll, inner) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
    assert!(
        inner <= 400,
        "{page}: the window is {inner} px wide, not a phone's"
    );
    assert!(
        scroll <= inner,
        "{page}: {scroll} px wide in a {inner} px window"
    );
}

#[test]
fn the_overview_counts_match_stats_and_nothing_leaves_the_origin() {
    let db = TempDb::new("console-overview");
    let server = Server::start(&db, &[]);
    a_mix(&server);
    let stats = server.stats();
    let response = server.call("GET", "/ui/", &[], None);
    for (name, value) in SECURITY_HEADERS {
        assert_eq!(response.header(name), Some(value), "{name} on /ui/");
    }
    let browser = browser();
    browser.goto(&format!("{}/ui/", server.base));
    browser.wait("the overview's counts", || {
        browser.text_now("#count-calls").as_deref() == Some(&stats["calls"].to_string())
    });
    for status in ["pending", "running", "succeeded", "failed", "cancelled"] {
        let expected = stats["by_status"][status].as_i64().unwrap_or(0).to_string();
        browser.wait_text(&format!("#count-{status}"), &expected);
    }
    browser.wait_text("#count-effects", &stats["effects"].to_string());
    browser.wait("two chart lines", || {
        browser.count(".chart-box[data-chart] svg path.line") == 2
    });
    browser.wait("the four built-ins' load", || {
        browser.count("#tool-load tr[data-tool]") == 4
    });
    browser.click("[data-tab=verify]");
    browser.click("#verify-run");
    browser.wait_text("#verdict", "Every invariant holds.");
    browser.wait("seven checks or more", || {
        browser.count("#checks li.check-ok") >= 7
    });
    browser.click("[data-tab=tools]");
    browser.wait("the four tools", || browser.count(".tool[data-tool]") == 4);
    assert_clean_and_same_origin(&browser, &server);
}

#[test]
fn a_status_filter_shows_exactly_the_matching_calls_and_survives_a_reload() {
    // The built-ins `a_mix` uses, and a tool whose calls carry a business key.
    let tools = ToolsFile::write(&json!({"tools": {
        "charge": {"kind": "builtin"},
        "fail": {"kind": "builtin"},
        "ship": {"kind": "command", "argv": ["/bin/sh", "-c", "cat >/dev/null; echo '{}'"],
                 "input_schema": {"type": "object", "required": ["order"],
                                  "properties": {"order": {"type": "string"}}},
                 "business_key": {"fields": ["/order"], "window_secs": 3600}},
    }}));
    let db = TempDb::new("console-filter");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let (ok, failed) = a_mix(&server);
    let shipped = settled(
        &server,
        "ship-1",
        &json!({"tool": "ship", "args": {"order": "order-42"}}),
    );
    let browser = browser();
    browser.goto(&format!("{}/ui/calls", server.base));
    browser.wait("every call listed", || {
        browser.count("tr[data-call-id]") == 5
    });
    browser.click("#filters input[name=status][value=failed]");
    browser.click("#apply-filters");
    browser.wait("the filter in the address bar", || {
        browser.url().ends_with("/ui/calls?status=failed")
    });
    let only_failed = |browser: &Browser| {
        browser.wait("the failed call alone", || {
            browser.attributes("tr[data-call-id]", "data-call-id") == [failed.clone()]
        });
        assert_eq!(
            browser.attributes("tr[data-call-id]", "data-status"),
            ["failed"]
        );
    };
    only_failed(&browser);
    browser.reload();
    only_failed(&browser);
    assert_eq!(
        browser.count("#filters input[name=status][value=failed]:checked"),
        1,
        "the form shows the filter after a reload"
    );

    // One box finds a call by its key, its effect id, its business key, or its id.
    let effect = server.get(&format!("/v1/tool-calls/{}", ok[1])).1["effect_id"]
        .as_str()
        .unwrap()
        .to_string();
    for (query, found) in [
        ("mix-ok-1", &ok[0]),
        (effect.as_str(), &ok[1]),
        ("order-42", &shipped),
    ] {
        browser.type_into("#search-input", query);
        browser.click("#search button[type=submit]");
        browser.wait(&format!("{query} found"), || {
            browser.attributes("tr[data-call-id]", "data-call-id") == [found.clone()]
        });
    }
    browser.type_into("#search-input", &ok[2]);
    browser.click("#search button[type=submit]");
    browser.wait("the call's own page", || {
        browser.url().ends_with(&format!("/ui/calls/{}", ok[2]))
    });
    assert_clean_and_same_origin(&browser, &server);
}

#[test]
fn a_call_shows_its_audit_timeline_and_markup_in_it_is_only_text() {
    let db = TempDb::new("console-detail");
    let server = Server::start(&db, &[]);
    let body = json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": XSS_ARG}});
    let id = settled(&server, XSS_KEY, &body);
    let browser = browser();
    browser.goto(&format!("{}/ui/calls/{id}", server.base));
    browser.wait("created, claimed, succeeded", || {
        browser.attributes("#timeline li", "data-event") == ["created", "claimed", "succeeded"]
    });
    let owner = browser.text("#timeline li[data-event=claimed] .owner");
    assert!(
        owner.contains('@') && owner.contains(':'),
        "owner pid:thread@instance: {owner}"
    );
    browser.wait_text("[data-fact=key] dd", XSS_KEY);
    let args = browser.text("#call-args");
    assert!(args.contains(&json!(XSS_ARG).to_string()), "{args}");
    browser.wait_text("#call-status", "✓succeeded");

    browser.goto(&format!("{}/ui/calls", server.base));
    browser.wait("the call listed", || browser.count("tr[data-call-id]") == 1);
    browser.wait_text("tr[data-call-id] .idem-key", XSS_KEY);
    assert_eq!(
        browser.eval("return window.xss === undefined;", vec![]),
        true
    );
    assert_eq!(
        browser.count("main img, main script"),
        0,
        "no element came from data"
    );
    assert_clean_and_same_origin(&browser, &server);
}

/// A running command's last `$PROGRESS_FD` report is on its call's page
/// (and in `GET /v1/tool-calls/{id}`).
#[test]
fn a_running_calls_page_shows_its_last_progress() {
    let script = r#"printf '{"progress": 1, "total": 2, "message": "halfway"}\n' >&"$PROGRESS_FD"; sleep 60"#;
    let tools = ToolsFile::write(&json!({"tools": {
        "report": {"kind": "command", "argv": ["/bin/bash", "-c", script], "timeout_ms": 120000,
                   "input_schema": {"type": "object"}},
    }}));
    let db = TempDb::new("console-progress");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let (_, call) = server.post("report-1", &json!({"tool": "report", "args": {}}));
    let id = call["call_id"].as_str().unwrap().to_string();
    eventually("the progress in the API", || {
        let mut progress = server.get(&format!("/v1/tool-calls/{id}")).1["progress"].take();
        let reported_at = progress.as_object_mut().and_then(|p| p.remove("at"));
        reported_at.is_some_and(|at| at.as_f64().is_some_and(|t| t > 1.7e9))
            && progress == json!({"progress": 1.0, "total": 2.0, "message": "halfway"})
    });
    let browser = browser();
    browser.goto(&format!("{}/ui/calls/{id}", server.base));
    browser.wait_text("[data-fact=progress] dd", "halfway (1 of 2)");
    assert_clean_and_same_origin(&browser, &server);
    server.request("POST", &format!("/v1/tool-calls/{id}/cancel"), &[], None);
    eventually("the call cancelled", || {
        server.get(&format!("/v1/tool-calls/{id}")).1["status"] == "cancelled"
    });
}

#[test]
fn cancelling_a_pending_call_in_the_page_makes_it_cancelled() {
    // One slot for `hold`: the first call takes it, the second waits pending.
    let tools = ToolsFile::write(&json!({"tools": {
        "hold": {"kind": "command", "argv": ["/bin/sleep", "60"], "timeout_ms": 120000,
                 "max_concurrency": 1, "input_schema": {"type": "object"}},
    }}));
    let db = TempDb::new("console-cancel");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let hold = json!({"tool": "hold", "args": {}});
    let (_, first) = server.post("hold-1", &hold);
    let (_, second) = server.post("hold-2", &hold);
    let id = second["call_id"].as_str().unwrap().to_string();
    assert_eq!(
        server.get(&format!("/v1/tool-calls/{id}")).1["status"],
        "pending"
    );
    let browser = browser();
    browser.goto(&format!("{}/ui/calls/{id}", server.base));
    browser.click("#cancel-button");
    browser.type_into("#cancel-reason", "wrong amount");
    browser.click("#cancel-confirm");
    browser.wait("the page to show it cancelled", || {
        browser
            .text_now("#call-status")
            .is_some_and(|s| s.contains("cancelled"))
    });
    let (status, call) = server.get(&format!("/v1/tool-calls/{id}"));
    assert_eq!(
        (status, call["status"].as_str()),
        (200, Some("cancelled")),
        "{call}"
    );
    assert!(
        browser.count("#cancel-button") == 0,
        "no cancel for a settled call"
    );
    assert_clean_and_same_origin(&browser, &server);
    // The first call's `sleep` would outlive a killed server: stop it too.
    let first = first["call_id"].as_str().unwrap();
    server.request("POST", &format!("/v1/tool-calls/{first}/cancel"), &[], None);
    eventually("the running call cancelled", || {
        server.get(&format!("/v1/tool-calls/{first}")).1["status"] == "cancelled"
    });
}

#[test]
fn a_wrong_token_sees_nothing_and_each_tenant_only_its_own_calls() {
    let auth = AuthFile::new(&[
        ("acme", "acme-token", false),
        ("globex", "globex-token", false),
        ("ops", "ops-token", true),
    ]);
    let db = TempDb::new("console-tenants");
    let server = Server::start(&db, &["--auth-file", auth.path_str()]);
    let post = |token: &str, key: &str| {
        let bearer = format!("Bearer {token}");
        let headers = [("Authorization", bearer.as_str()), ("Idempotency-Key", key)];
        let body = charge(5).to_string();
        let (_, call) = server.request("POST", "/v1/tool-calls?wait=10", &headers, Some(&body));
        call["call_id"].as_str().unwrap().to_string()
    };
    let acme = post("acme-token", "acme-order");
    let globex = post("globex-token", "globex-order");
    let browser = browser();
    let sign_in = |token: &str| {
        browser.wait_for("#token-input");
        browser.type_into("#token-input", token);
        browser.click("#sign-in button[type=submit]");
    };

    browser.goto(&format!("{}/ui/calls", server.base));
    sign_in("not-a-token");
    browser.wait_text_containing("#sign-in-message", "refused");
    let page = browser.eval("return document.body.innerText", vec![]);
    for secret in [&acme, &globex] {
        assert!(!page.as_str().unwrap().contains(secret.as_str()), "{page}");
    }
    assert_eq!(browser.count("tr[data-call-id], #count-calls"), 0);
    assert_eq!(browser.eval("return document.cookie", vec![]), "");

    sign_in("acme-token");
    browser.wait_text("#role", "tenant");
    browser.wait("acme's call alone", || {
        browser.attributes("tr[data-call-id]", "data-call-id") == [acme.clone()]
    });
    browser.goto(&format!("{}/ui/calls/{globex}", server.base));
    browser.wait_text_containing("#call-body", "No such call");
    browser.goto(&format!("{}/ui/calls?q=globex-order", server.base));
    browser.wait_text_containing("#results", "Nothing found");
    assert_eq!(browser.count("[data-tab=verify]:not([hidden])"), 0);

    browser.click("#sign-out");
    sign_in("ops-token");
    browser.wait_text("#role", "admin");
    browser.goto(&format!("{}/ui/calls", server.base));
    browser.wait("both tenants' calls", || {
        browser.count("tr[data-call-id]") == 2
    });
    let mut tenants = browser.texts("tr[data-call-id] .tenant-cell");
    tenants.sort();
    assert_eq!(tenants, ["acme", "globex"]);
}

#[test]
fn no_page_scrolls_sideways_at_phone_width() {
    let db = TempDb::new("console-phone");
    let server = Server::start(&db, &[]);
    let (ok, _) = a_mix(&server);
    let long =
        json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": "x".repeat(400)}});
    let wide = settled(&server, &format!("long-{}", "k".repeat(200)), &long);
    let browser = browser();
    browser.resize(390, 844);
    for (page, ready) in [
        ("/ui/".to_string(), "#count-calls"),
        ("/ui/calls".to_string(), "tr[data-call-id]"),
        (format!("/ui/calls/{}", ok[0]), "#timeline li"),
        (format!("/ui/calls/{wide}"), "#timeline li"),
        ("/ui/tools".to_string(), ".tool[data-tool]"),
        ("/ui/verify".to_string(), "#verify-run"),
    ] {
        browser.goto(&format!("{}{page}", server.base));
        browser.wait_for(ready);
        assert_no_horizontal_overflow(&browser, &page);
    }
    browser.resize(LAPTOP.0, LAPTOP.1);
    assert_clean_and_same_origin(&browser, &server);
}
