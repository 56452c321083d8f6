//! The web console during an incident, in a real browser against the real
//! binary: the service is killed (`kill -9`) under an open call page and
//! under the overview; while it is down each page says "offline since
//! HH:MM:SS", keeps the last numbers it read (greyed, the call's Cancel
//! off) and never a green "live", and keeps trying with a backoff (1 s,
//! doubling, capped at 10 s); restarted on the same port and database, each
//! recovers by itself and shows how the call ended. A paused service (its
//! reads hang) reads as offline once a read times out. And the tools page
//! reads the load in the overview's scope: an admin sees another tenant's
//! running call.

use crate::console::assert_same_origin;
use crate::support::browser::{browser, Browser};
use crate::support::downstream::ToolsFile;
use crate::support::{
    address_after, charge, signal, AuthFile, Http, Proc, Server, TempDb, SERVER_BIN,
};
use serde_json::json;

/// A one-second lease, looked for every 50 ms: a restarted service takes
/// back the killed one's call at once.
const QUICK_RECOVERY: [&str; 4] = ["--lease-secs", "1", "--recover-interval-ms", "50"];

/// The service on `port` (`"0"`: any free one) and `db`.
fn serve(db: &TempDb, port: &str) -> Server {
    let mut args = vec!["--port", port, "--db", db.path_str()];
    args.extend_from_slice(&QUICK_RECOVERY);
    let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    Server {
        proc,
        base,
        db: db.path.clone(),
    }
}

/// `kill -9` the service, as a crash or an operator would.
fn kill(server: &mut Server) -> String {
    let port = server.base.rsplit(':').next().unwrap().to_string();
    server.kill();
    port
}

/// A call of the built-in `sleep`, running; its id.
fn sleeping(server: &Server, key: &str, seconds: u32) -> String {
    let (status, call) = server.post(key, &json!({"tool": "sleep", "args": {"seconds": seconds}}));
    assert!(status == 200 || status == 202, "{call}");
    call["call_id"].as_str().unwrap().to_string()
}

/// What the page says about its reading: `live`, `read`, `offline`…
fn reading(browser: &Browser) -> Option<String> {
    browser
        .eval(
            "const e = document.getElementById('live-state'); return e ? e.dataset.state : null;",
            vec![],
        )
        .as_str()
        .map(str::to_string)
}

/// The page cannot read, and says so: the banner and the marker say
/// "offline since HH:MM:SS", nothing says "live", and `data` is greyed
/// with its buttons off.
fn assert_offline(browser: &Browser, data: &str) {
    browser.wait("the offline banner", || browser.count("#offline") == 1);
    let banner = browser.text("#offline");
    assert!(is_offline_since(&banner, "Offline since "), "{banner}");
    let marker = browser.text("#live-state");
    assert!(is_offline_since(&marker, "offline since "), "{marker}");
    assert_eq!(reading(browser).as_deref(), Some("offline"));
    assert_eq!(browser.count("[data-state=live]"), 0, "a green live");
    let look = browser.eval(
        "const e = document.querySelector(arguments[0]); const s = getComputedStyle(e); \
         return [e.classList.contains('stale'), Number(s.opacity), s.filter, \
                 e.querySelectorAll('button:not(:disabled)').length];",
        vec![json!(data)],
    );
    assert_eq!(look[0], true, "{data} greyed: {look}");
    assert!(look[1].as_f64().unwrap() < 1.0, "{data} faded: {look}");
    assert!(
        look[2].as_str().unwrap().contains("grayscale"),
        "{data} grey: {look}"
    );
    assert_eq!(look[3], 0, "buttons in {data} are off: {look}");
}

/// `text` holds `prefix` followed by a time of day, `HH:MM:SS`.
fn is_offline_since(text: &str, prefix: &str) -> bool {
    text.find(prefix).is_some_and(|at| {
        let time: Vec<char> = text[at + prefix.len()..].chars().take(8).collect();
        time.len() == 8
            && time.iter().enumerate().all(|(i, c)| match i {
                2 | 5 => *c == ':',
                _ => c.is_ascii_digit(),
            })
    })
}

/// The page reads again: no banner, nothing greyed.
fn assert_back(browser: &Browser, state: &str) {
    browser.wait(&format!("the page {state} again"), || {
        reading(browser).as_deref() == Some(state)
    });
    assert_eq!(browser.count("#offline, .stale"), 0);
}

/// The browser's console holds no error but the reads that found the
/// service gone (each a load of the service's own origin that was
/// refused, reset or left without an answer), and no request left the
/// origin.
fn assert_only_refused_reads(browser: &Browser, server: &Server) {
    let unexpected: Vec<String> = browser
        .console_errors()
        .into_iter()
        .filter(|message| {
            let refused = [
                "ERR_CONNECTION_REFUSED",
                "ERR_CONNECTION_RESET",
                "ERR_EMPTY_RESPONSE",
            ]
            .iter()
            .any(|net| message.contains(net));
            !(refused && message.starts_with(&format!("{}/", server.base)))
        })
        .collect();
    assert!(unexpected.is_empty(), "console errors: {unexpected:#?}");
    assert_same_origin(browser, server);
}

#[test]
fn an_open_call_page_rides_out_an_outage_and_shows_how_the_call_ended() {
    let db = TempDb::new("console-outage-call");
    let mut server = serve(&db, "0");
    // The browser first (tests take turns with it): the call must still be
    // running when the page opens.
    let browser = browser();
    let id = sleeping(&server, "outage-call", 6);
    browser.goto(&format!("{}/ui/calls/{id}", server.base));
    browser.wait_text_containing("#call-status", "running");
    browser.wait("the page live", || {
        reading(&browser).as_deref() == Some("live")
    });
    browser.wait_for("#cancel-button:not(:disabled)");

    let port = kill(&mut server);
    assert_offline(&browser, "#call-body");
    assert_offline(&browser, ".call-state");
    browser.wait_text_containing("#call-status", "running");
    assert_eq!(browser.text("[data-fact=attempt] dd"), "1");

    let server = serve(&db, &port);
    // Taken back from the killed process, run again, and settled: the page
    // follows it to the end by itself and stops offering a cancel.
    browser.wait_text_containing("#call-status", "succeeded");
    assert_back(&browser, "read");
    assert_eq!(browser.text("[data-fact=attempt] dd"), "2");
    assert_eq!(browser.count("#cancel-button"), 0);
    assert!(
        browser
            .attributes("#timeline li", "data-event")
            .contains(&"recover".to_string()),
        "the timeline shows the lease taken back"
    );
    let (_, call) = server.get(&format!("/v1/tool-calls/{id}"));
    assert_eq!(call["status"], "succeeded", "{call}");
    assert_only_refused_reads(&browser, &server);
}

#[test]
fn the_overview_keeps_its_numbers_greyed_while_offline_and_recovers() {
    let db = TempDb::new("console-outage-overview");
    let mut server = serve(&db, "0");
    let (_, settled) = server.post("outage-settled", &charge(5));
    server.wait_terminal(settled["call_id"].as_str().unwrap());
    let browser = browser();
    let running = sleeping(&server, "outage-running", 6);
    browser.goto(&format!("{}/ui/", server.base));
    browser.wait_text("#count-running", "1");
    browser.wait_text("#count-succeeded", "1");
    assert_eq!(reading(&browser).as_deref(), Some("live"));

    let port = kill(&mut server);
    assert_offline(&browser, "#overview-body");
    // The last numbers read are still there, and the page keeps asking,
    // each failed read waiting longer than the one before.
    assert_eq!(browser.text("#count-running"), "1");
    assert_eq!(browser.text("#count-succeeded"), "1");
    assert_eq!(browser.text("#count-calls"), "2");
    browser.wait("a second failed read, after a longer wait", || {
        browser.attributes("#offline", "data-retry-ms") == ["2000"]
    });
    let waits = browser.eval(
        "return import('/ui/js/poll.js').then(p => [1, 2, 3, 4, 5, 6, 20].map(p.retryDelay));",
        vec![],
    );
    assert_eq!(waits, json!([1000, 2000, 4000, 8000, 10000, 10000, 10000]));

    let server = serve(&db, &port);
    server.wait_terminal(&running);
    browser.wait_text("#count-succeeded", "2");
    browser.wait_text("#count-running", "0");
    assert_back(&browser, "live");
    assert_only_refused_reads(&browser, &server);
}

#[test]
fn a_paused_service_reads_as_offline_once_a_read_times_out() {
    let db = TempDb::new("console-outage-paused");
    let server = serve(&db, "0");
    let browser = browser();
    browser.goto(&format!("{}/ui/", server.base));
    browser.wait_text("#count-calls", "0");
    browser.wait("the page live", || {
        reading(&browser).as_deref() == Some("live")
    });

    // Stopped, it still accepts connections but answers nothing: a read
    // hangs until the page gives it up and says it is offline.
    signal(&server.proc.child, "STOP");
    assert_offline(&browser, "#overview-body");
    browser.wait_text_containing("#offline", "did not answer within 10 s");
    signal(&server.proc.child, "CONT");
    let (_, call) = server.post("after-pause", &charge(5));
    server.wait_terminal(call["call_id"].as_str().unwrap());
    browser.wait_text("#count-calls", "1");
    assert_back(&browser, "live");
    assert_only_refused_reads(&browser, &server);
}

#[test]
fn an_admins_tools_page_shows_another_tenants_running_call() {
    // One slot for `hold`, taken by acme's call.
    let tools = ToolsFile::write(&json!({"tools": {
        "hold": {"kind": "command", "argv": ["/bin/sleep", "60"], "timeout_ms": 120000,
                 "max_concurrency": 1, "input_schema": {"type": "object"}},
    }}));
    let auth = AuthFile::new(&[("acme", "acme-token", false), ("ops", "ops-token", true)]);
    let db = TempDb::new("console-tools-scope");
    let server = Server::start(
        &db,
        &["--tools", tools.path_str(), "--auth-file", auth.path_str()],
    );
    let headers = [
        ("Authorization", "Bearer acme-token"),
        ("Idempotency-Key", "acme-hold"),
    ];
    let body = json!({"tool": "hold", "args": {}}).to_string();
    let (_, call) = server.request("POST", "/v1/tool-calls", &headers, Some(&body));
    let id = call["call_id"].as_str().unwrap().to_string();
    let acme_get =
        |path: &str| server.request("GET", path, &[("Authorization", "Bearer acme-token")], None);
    crate::support::eventually("acme's call running", || {
        acme_get(&format!("/v1/tool-calls/{id}")).1["status"] == "running"
    });

    let browser = browser();
    browser.goto(&format!("{}/ui/tools", server.base));
    browser.type_into("#token-input", "ops-token");
    browser.click("#sign-in button[type=submit]");
    browser.wait_text("#role", "admin");
    let running = ".tool[data-tool=hold] [data-fact=running] dd";
    browser.wait_text(running, "1");
    browser.wait_text(".tool[data-tool=hold] [data-fact=limit] dd", "1");
    browser.wait_text_containing("#tools-scope", "every tenant");
    assert_same_origin(&browser, &server);

    // `sleep` would outlive a killed server: stop it.
    let cancel = format!("/v1/tool-calls/{id}/cancel");
    let auth_header = [("Authorization", "Bearer acme-token")];
    server.request("POST", &cancel, &auth_header, None);
    crate::support::eventually("acme's call cancelled", || {
        acme_get(&format!("/v1/tool-calls/{id}")).1["status"] == "cancelled"
    });
}
