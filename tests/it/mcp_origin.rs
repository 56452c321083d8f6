//! `POST /mcp` against the real binary, on what it must refuse before any
//! message is read: a `Host` that is neither loopback nor a `--public-host`
//! name (a DNS-rebinding page, whose `Origin` equals its own `Host`), and a
//! cross-origin `Origin` not on `--allowed-origin`'s list; each `403` with
//! its code, and no call created. Also the small protocol rules around it: a
//! notification in an unsupported version is `400`, `get_tool_call` holds
//! its arguments to its own schema, and an unknown tool's error lists every
//! tool `tools/list` shows.

use crate::support::raw::{RawClient, ReplyText};
use crate::support::{Counts, Http, Server, TempDb};
use idempotent_tool::client::HttpResponse;
use serde_json::{json, Value};

/// A `tools/call` of `charge` that would create a call if it were served.
fn charge(key: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "charge", "arguments": {"amount": 5},
        "_meta": {"dev.idempotent-tool/idempotency-key": key}}})
    .to_string()
}

/// POST `body` to `/mcp` with exactly these `Host` and `Origin` headers
/// (a raw socket: the shared client always sends its own `Host`).
fn post(server: &Server, host: &str, origin: Option<&str>, body: &str) -> HttpResponse {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(origin) = origin {
        head.push_str(&format!("Origin: {origin}\r\n"));
    }
    let mut client = RawClient::connect(server.addr());
    client.send(format!("{head}\r\n{body}").as_bytes());
    client.reply()
}

/// The conformance suite's DNS-rebinding case: `Host: evil.example.com` with
/// the matching `Origin` is refused, and nothing is created; the server's
/// own loopback name and origin are served.
#[test]
fn a_rebound_host_is_refused_whatever_its_origin_says() {
    let db = TempDb::new("mcp-origin");
    let server = Server::start(&db, &[]);
    for (host, origin) in [
        ("evil.example.com", Some("http://evil.example.com")),
        ("evil.example.com:8081", None),
        ("10.1.2.3", Some("http://127.0.0.1")),
    ] {
        let refused = post(&server, host, origin, &charge("rebound"));
        assert_eq!(
            (refused.status, refused.error_code()),
            (403, "host_not_allowed".into()),
            "{host} {origin:?}: {}",
            refused.text()
        );
    }
    assert_eq!(db.calls(), 0, "a refused request creates no call");

    let own = server.addr().to_string();
    let served = post(
        &server,
        &own,
        Some(&format!("http://{own}")),
        &charge("own"),
    );
    assert_eq!(served.status, 200, "{}", served.text());
    let port = own.rsplit_once(':').unwrap().1;
    let by_name = post(&server, &format!("localhost:{port}"), None, &charge("own"));
    assert_eq!(by_name.status, 200, "{}", by_name.text());
    assert_eq!(db.calls(), 1);
}

/// A cross-origin page is refused unless listed, loopback ones included;
/// `--public-host` adds a name, and its own origin is then served.
#[test]
fn cross_origin_pages_need_the_allow_list_and_public_names_the_flag() {
    let db = TempDb::new("mcp-origin-list");
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let plain = Server::start(&db, &[]);
    let own = plain.addr().to_string();
    for origin in ["http://localhost:5173", "https://evil.example", "null"] {
        let refused = post(&plain, &own, Some(origin), &ping);
        assert_eq!(
            (refused.status, refused.error_code()),
            (403, "origin_not_allowed".into()),
            "{origin}"
        );
    }
    drop(plain);

    let flags = [
        "--allowed-origin",
        "http://localhost:5173",
        "--public-host",
        "tools.example.com",
    ];
    let server = Server::start(&db, &flags);
    let own = server.addr().to_string();
    assert_eq!(
        post(&server, &own, Some("http://localhost:5173"), &ping).status,
        200
    );
    let public = post(
        &server,
        "tools.example.com",
        Some("https://tools.example.com"),
        &ping,
    );
    assert_eq!(public.status, 200, "{}", public.text());
    let other_page = post(
        &server,
        "tools.example.com",
        Some("https://evil.example"),
        &ping,
    );
    assert_eq!(other_page.error_code(), "origin_not_allowed");
    assert_eq!(
        post(&server, "evil.example.com", None, &ping).error_code(),
        "host_not_allowed"
    );
}

/// A bad `--public-host` or `--allowed-origin` is a usage error (exit 2).
#[test]
fn origin_flags_that_could_never_match_are_usage_errors() {
    for flags in [
        &["--public-host", "a.example:443"][..],
        &["--allowed-origin", "a.example"],
        &["--allowed-origin", "https://a.example/path"],
    ] {
        let out = std::process::Command::new(crate::support::SERVER_BIN)
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(flags[0]), "{stderr}");
    }
}

/// One JSON-RPC message from loopback, under `version`.
fn rpc(server: &Server, version: &str, message: Value) -> HttpResponse {
    server.call(
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", version)],
        Some(&message.to_string()),
    )
}

#[test]
fn a_notification_in_an_unsupported_version_is_refused() {
    let db = TempDb::new("mcp-note");
    let server = Server::start(&db, &[]);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let refused = rpc(&server, "1999-01-01", note.clone());
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["error"]["code"], -32022);
    assert_eq!(rpc(&server, "2025-11-25", note).status, 202);
}

/// `get_tool_call`'s arguments are held to the schema `tools/list` shows:
/// before 2025-11-25 a protocol error (`-32602`), from it a tool execution
/// error (`isError`), as for every tool. Unknown tools' errors list it.
#[test]
fn get_tool_call_holds_its_own_schema_and_is_listed_as_known() {
    let db = TempDb::new("mcp-get");
    let server = Server::start(&db, &[]);
    let call = |version: &str, arguments: Value| -> Value {
        let message = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "get_tool_call", "arguments": arguments}});
        let response = rpc(&server, version, message);
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()
    };
    for bad in [
        json!({"call_id": 5}),
        json!({"call_id": "c_0000000000000000", "extra": true}),
        json!({"call_id": "c_0000000000000000", "wait_secs": 31}),
        json!({}),
    ] {
        let old = call("2025-06-18", bad.clone());
        assert_eq!(old["error"]["code"], -32602, "{bad}: {old}");
        let new = call("2025-11-25", bad.clone());
        assert_eq!(new["result"]["isError"], true, "{bad}: {new}");
        let text = new["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("bad_request"), "{text}");
    }
    let missing = call("2025-06-18", json!({"call_id": "c_0000000000000000"}));
    assert!(
        missing["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("not_found"),
        "a well-formed id is looked up: {missing}"
    );

    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "refund", "arguments": {}}});
    let unknown_tool = rpc(&server, "2025-11-25", message).json();
    let tools = &unknown_tool["error"]["data"]["tools"];
    assert_eq!(
        tools,
        &json!(["charge", "fail", "send_email", "sleep", "get_tool_call"]),
        "{unknown_tool}"
    );
}
