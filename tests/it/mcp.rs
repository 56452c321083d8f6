//! `POST /mcp` against the real binary, in raw JSON-RPC over HTTP: each
//! revision's handshake (2025-03-26, 2025-06-18, 2025-11-25) and the stateless
//! 2026-07-28 (`server/discover`, `_meta`, mirrored headers); `tools/list`;
//! `tools/call` exactly once per key (from `_meta` or `params.idempotencyKey`,
//! or fresh per request), the original outcome replayed (errors included),
//! a reused key with other arguments refused with `idempotency_conflict`,
//! a slow call answered `running` with a handle `get_tool_call` reads; the
//! JSON-RPC error codes; auth and tenants; metrics labelled `transport="mcp"`.

use crate::support::{AuthFile, Server, TempDb};
use crate::support::{Counts, Http};
use idempotent_tool::client::HttpResponse;
use serde_json::{json, Value};

const META_KEY: &str = "dev.idempotent-tool/idempotency-key";
const HANDSHAKE_REVISIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
const STATELESS: &str = "2026-07-28";

/// Headers, params, method, and the JSON-RPC error code expected.
type RawCase<'a> = (Vec<(&'a str, &'a str)>, Value, &'a str, i64);

/// A client of one revision: it sends the headers that revision asks for.
struct Client<'a> {
    server: &'a Server,
    /// `None`: no `MCP-Protocol-Version` (what 2025-03-26 clients send).
    version: Option<&'a str>,
    token: Option<&'a str>,
}

impl<'a> Client<'a> {
    fn new(server: &'a Server, version: Option<&'a str>) -> Client<'a> {
        Client {
            server,
            version,
            token: None,
        }
    }

    /// POST one JSON-RPC body; a stateless client also puts its version in
    /// `_meta` and mirrors the method and tool name in headers.
    fn post(&self, mut body: Value) -> HttpResponse {
        let mut headers: Vec<(String, String)> = vec![
            ("Content-Type".into(), "application/json".into()),
            (
                "Accept".into(),
                "application/json, text/event-stream".into(),
            ),
        ];
        if let Some(version) = self.version {
            headers.push(("MCP-Protocol-Version".into(), version.into()));
        }
        if self.version == Some(STATELESS) && body.is_object() {
            let method = body["method"].as_str().unwrap_or_default().to_string();
            headers.push(("Mcp-Method".into(), method));
            if let Some(name) = body["params"]["name"].as_str() {
                headers.push(("Mcp-Name".into(), name.into()));
            }
            body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = STATELESS.into();
            body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        }
        if let Some(token) = self.token {
            headers.push(("Authorization".into(), format!("Bearer {token}")));
        }
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        self.server
            .call("POST", "/mcp", &headers, Some(&body.to_string()))
    }

    /// A request's JSON-RPC answer, asserting the HTTP status.
    fn rpc(&self, status: u16, method: &str, params: Value) -> Value {
        let response =
            self.post(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        let body = response.json();
        assert_eq!(response.status, status, "{method}: {body}");
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        body
    }

    /// `tools/call` of `tool` with `args` under `key` (in `_meta`), its result.
    fn call(&self, tool: &str, args: Value, key: Option<&str>) -> Value {
        let mut params = json!({"name": tool, "arguments": args});
        if let Some(key) = key {
            params["_meta"] = json!({ META_KEY: key });
        }
        let answer = self.rpc(200, "tools/call", params);
        assert!(answer.get("error").is_none(), "{answer}");
        answer["result"].clone()
    }
}

/// The outcome as the structured content says it, checked against the text.
fn outcome(result: &Value) -> Value {
    let text = result["content"][0]["text"]
        .as_str()
        .expect("a text content");
    let from_text: Value = serde_json::from_str(text).unwrap();
    assert_eq!(result["structuredContent"], from_text, "{result}");
    from_text
}

fn start(extra: &[&str]) -> (TempDb, Server) {
    let db = TempDb::new("mcp");
    let server = Server::start(&db, extra);
    (db, server)
}

/// Each handshake revision negotiates its own version (an unknown one gets
/// the newest handshake revision), issues no session, accepts
/// `notifications/initialized` with `202`, answers `ping`, and lists every
/// tool with its schemas as that revision shapes them.
#[test]
fn each_handshake_revision_negotiates_and_lists_the_tools() {
    let (_db, server) = start(&[]);
    for version in HANDSHAKE_REVISIONS {
        let client = Client::new(&server, None);
        let init = client.post(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}));
        assert_eq!(init.status, 200);
        assert!(
            init.header("Mcp-Session-Id").is_none(),
            "no session is issued"
        );
        let init = init.json();
        assert_eq!(init["id"], "i");
        assert_eq!(init["result"]["protocolVersion"], version, "{init}");
        assert_eq!(
            init["result"]["capabilities"]["tools"]["listChanged"],
            false
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "idempotent-tool");

        let client = Client::new(&server, (version != "2025-03-26").then_some(version));
        let note = client.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!((note.status, note.body.len()), (202, 0));
        assert_eq!(client.rpc(200, "ping", json!({}))["result"], json!({}));

        let tools = client.rpc(200, "tools/list", json!({}))["result"]["tools"].clone();
        let names: Vec<&str> = tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["charge", "fail", "send_email", "sleep", "get_tool_call"],
            "{version}"
        );
        let charge = &tools[0];
        assert_eq!(charge["inputSchema"]["required"], json!(["amount"]));
        assert_eq!(
            charge["annotations"]["idempotentHint"], false,
            "no business key"
        );
        assert_eq!(tools[4]["annotations"]["readOnlyHint"], true);
        let structured = version != "2025-03-26";
        assert_eq!(
            charge.get("outputSchema").is_some(),
            structured,
            "{version}"
        );
    }
    let client = Client::new(&server, None);
    let old = client.rpc(
        200,
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}}),
    );
    assert_eq!(old["result"]["protocolVersion"], "2025-11-25");
    let unknown = Client::new(&server, Some("1999-01-01")).rpc(400, "ping", json!({}));
    assert_eq!(unknown["error"]["code"], -32022);
}

/// 2026-07-28: `server/discover` lists every version; the version in `_meta`
/// must match `MCP-Protocol-Version`, and `Mcp-Method`/`Mcp-Name` the body
/// (`-32020`); an unknown version is `-32022` naming the supported ones; an
/// unknown method `404 -32601`, and so are `initialize` and `ping`; `_meta`
/// without the version or the capabilities is `400 -32602`; every result
/// says `resultType: complete`.
#[test]
fn the_stateless_revision_discovers_and_checks_meta_against_headers() {
    let (_db, server) = start(&[]);
    let client = Client::new(&server, Some(STATELESS));
    let discover = client.rpc(200, "server/discover", json!({}));
    let result = &discover["result"];
    assert_eq!(
        result["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "idempotent-tool"
    );
    let list = client.rpc(200, "tools/list", json!({}));
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["cacheScope"], "private");
    let out = outcome(&client.call("charge", json!({"amount": 3}), Some("stateless-1")));
    assert_eq!(out["status"], "succeeded");

    let meta = |version: &str| {
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": version,
                         "io.modelcontextprotocol/clientCapabilities": {}}})
    };
    let raw = |headers: &[(&str, &str)], params: Value, method: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let response = server.call("POST", "/mcp", headers, Some(&body.to_string()));
        (response.status, response.json())
    };
    let cases: Vec<RawCase> = vec![
        (
            vec![("Mcp-Method", "ping")],
            meta(STATELESS),
            "ping",
            -32020,
        ),
        (
            vec![
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Mcp-Method", "ping"),
            ],
            meta(STATELESS),
            "ping",
            -32020,
        ),
        (
            vec![("MCP-Protocol-Version", STATELESS)],
            meta(STATELESS),
            "ping",
            -32020,
        ),
        (
            vec![("MCP-Protocol-Version", STATELESS), ("Mcp-Method", "ping")],
            json!({}),
            "ping",
            -32602,
        ),
        (
            vec![("MCP-Protocol-Version", STATELESS), ("Mcp-Method", "ping")],
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS}}),
            "ping",
            -32602,
        ),
        (
            vec![
                ("MCP-Protocol-Version", STATELESS),
                ("Mcp-Method", "server/discover"),
            ],
            meta("3000-01-01"),
            "server/discover",
            -32020,
        ),
        (
            vec![
                ("MCP-Protocol-Version", STATELESS),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "sleep"),
            ],
            {
                let mut p = meta(STATELESS);
                p["name"] = "charge".into();
                p
            },
            "tools/call",
            -32020,
        ),
        (
            vec![
                ("MCP-Protocol-Version", "3000-01-01"),
                ("Mcp-Method", "ping"),
            ],
            meta("3000-01-01"),
            "ping",
            -32022,
        ),
    ];
    for (headers, params, method, code) in cases {
        let (status, body) = raw(&headers, params, method);
        assert_eq!(
            (status, body["error"]["code"].as_i64()),
            (400, Some(code)),
            "{headers:?}: {body}"
        );
    }
    let (_, unsupported) = raw(
        &[
            ("MCP-Protocol-Version", "3000-01-01"),
            ("Mcp-Method", "ping"),
        ],
        meta("3000-01-01"),
        "ping",
    );
    assert_eq!(unsupported["error"]["data"]["requested"], "3000-01-01");
    assert!(unsupported["error"]["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&json!(STATELESS)));
    let unknown = client.rpc(404, "resources/list", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    for gone in ["initialize", "ping"] {
        let removed = client.rpc(404, gone, json!({}));
        assert_eq!(removed["error"]["code"], -32601, "{gone}");
    }
}

/// The same `_meta` key re-sent returns the original outcome with
/// `replayed: true` and runs nothing again (one call, one effect); the
/// SEP-3182 spelling `params.idempotencyKey` names the same key; a failure
/// is replayed as the same failure, `isError: true`.
#[test]
fn the_same_key_replays_the_original_outcome_without_a_second_effect() {
    let (db, server) = start(&[]);
    let client = Client::new(&server, Some("2025-11-25"));
    let first = client.call("charge", json!({"amount": 40}), Some("order-1"));
    assert_eq!(first["isError"], false);
    let first = outcome(&first);
    assert_eq!(
        (first["status"].clone(), first["replayed"].clone()),
        (json!("succeeded"), json!(false))
    );
    assert_eq!(first["result"]["charged"], 40);
    assert_eq!(first["idempotency_key"], "order-1");
    for _ in 0..3 {
        let again = outcome(&client.call("charge", json!({"amount": 40}), Some("order-1")));
        assert_eq!(again["replayed"], true);
        for field in ["call_id", "status", "attempt", "result"] {
            assert_eq!(again[field], first[field], "{field}");
        }
    }
    let sep = client.rpc(
        200,
        "tools/call",
        json!({"name": "charge", "arguments": {"amount": 40}, "idempotencyKey": "order-1"}),
    );
    assert_eq!(outcome(&sep["result"])["call_id"], first["call_id"]);
    assert_eq!((db.calls(), db.effects()), (1, 1));

    let failed = client.call("fail", json!({"retryable": false}), Some("order-2"));
    assert_eq!(failed["isError"], true);
    let failed = outcome(&failed);
    assert_eq!(failed["status"], "failed");
    let replay = client.call("fail", json!({"retryable": false}), Some("order-2"));
    assert_eq!(replay["isError"], true);
    let replay = outcome(&replay);
    assert_eq!(
        (replay["replayed"].clone(), replay["error"].clone()),
        (json!(true), failed["error"].clone())
    );
    assert_eq!(replay["attempt"], failed["attempt"]);
    assert_eq!(db.calls(), 2);
}

/// A key reused with other arguments is a JSON-RPC error whose `data` names
/// `idempotency_conflict` and the key's call; nothing runs. Without a key,
/// the same arguments are one call (`content`), or each request a new call
/// (`--mcp-keyless fresh`), or refused (`reject`).
#[test]
fn a_reused_key_with_other_arguments_conflicts_and_no_key_means_a_new_call() {
    let (db, server) = start(&[]);
    let client = Client::new(&server, Some("2025-06-18"));
    let first = outcome(&client.call("charge", json!({"amount": 5}), Some("k-conflict")));
    let params =
        json!({"name": "charge", "arguments": {"amount": 6}, "_meta": {META_KEY: "k-conflict"}});
    let conflict = client.rpc(200, "tools/call", params);
    let error = &conflict["error"];
    assert_eq!(error["code"], -32010, "{conflict}");
    assert_eq!(error["data"]["code"], "idempotency_conflict");
    assert_eq!(error["data"]["reason"], "idempotency_key_conflict");
    assert_eq!(error["data"]["call_id"], first["call_id"]);
    assert_eq!((db.calls(), db.effects()), (1, 1));

    // No key: by default (`content`) the same arguments are the same call.
    let a = outcome(&client.call("charge", json!({"amount": 5}), None));
    let b = outcome(&client.call("charge", json!({"amount": 5}), None));
    assert_eq!(a["call_id"], b["call_id"]);
    assert_eq!(
        (b["replayed"].clone(), b["key_source"].clone()),
        (json!(true), json!("content"))
    );
    assert!(a["idempotency_key"]
        .as_str()
        .unwrap()
        .starts_with("content-"));
    assert_eq!((db.calls(), db.effects()), (2, 2));

    // `--mcp-keyless fresh`: each request a new key, so a new call.
    let (db, server) = start(&["--mcp-keyless", "fresh"]);
    let client = Client::new(&server, Some("2025-06-18"));
    let a = outcome(&client.call("charge", json!({"amount": 5}), None));
    let b = outcome(&client.call("charge", json!({"amount": 5}), None));
    assert_ne!(a["call_id"], b["call_id"]);
    assert!(a["idempotency_key"].as_str().unwrap().starts_with("mcp-"));
    assert_eq!((db.calls(), db.effects()), (2, 2));

    // `--mcp-keyless reject`: a tool error saying how to send a key.
    let (db, server) = start(&["--mcp-keyless", "reject"]);
    let client = Client::new(&server, Some("2025-06-18"));
    let refused = client.call("charge", json!({"amount": 5}), None);
    assert_eq!(refused["isError"], true);
    assert!(refused["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("missing_idempotency_key"));
    assert_eq!(db.calls(), 0);
}

/// The JSON-RPC error codes: parse error `-32700`, invalid request `-32600`,
/// unknown method `-32601`, unknown tool and (before 2025-11-25) bad
/// arguments `-32602`; from 2025-11-25 bad arguments are a tool execution
/// error. Batches: answered under 2025-03-26, refused after it. `GET /mcp`
/// is `405`, a foreign `Origin` `403` (the rest: `mcp_origin.rs`).
#[test]
fn malformed_messages_and_bad_params_get_their_json_rpc_codes() {
    let (db, server) = start(&[]);
    let client = Client::new(&server, Some("2025-11-25"));
    let raw = |body: &str, version: Option<&str>| {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(v) = version {
            headers.push(("MCP-Protocol-Version", v));
        }
        let response = server.call("POST", "/mcp", &headers, Some(body));
        (response.status, response.json())
    };
    let (status, parse) = raw("{\"jsonrpc\": \"2.0\", ", None);
    assert_eq!(
        (status, parse["error"]["code"].clone(), parse["id"].clone()),
        (400, json!(-32700), Value::Null)
    );
    let (status, invalid) = raw(r#"{"id": 4, "method": "ping"}"#, None);
    assert_eq!(
        (
            status,
            invalid["error"]["code"].clone(),
            invalid["id"].clone()
        ),
        (400, json!(-32600), json!(4))
    );
    assert_eq!(
        client.rpc(200, "prompts/list", json!({}))["error"]["code"],
        -32601
    );
    let unknown_tool = client.rpc(
        200,
        "tools/call",
        json!({"name": "refund", "arguments": {}}),
    );
    assert_eq!(unknown_tool["error"]["code"], -32602);
    assert_eq!(
        client.rpc(200, "tools/list", json!({"cursor": "bogus"}))["error"]["code"],
        -32602
    );

    let bad = client.call("charge", json!({"amount": "lots"}), Some("bad-args"));
    assert_eq!(bad["isError"], true, "2025-11-25: a tool execution error");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("amount"),
        "{bad}"
    );
    let older = Client::new(&server, Some("2025-06-18"));
    let params =
        json!({"name": "charge", "arguments": {"amount": "lots"}, "idempotencyKey": "bad-args-2"});
    assert_eq!(
        older.rpc(200, "tools/call", params)["error"]["code"],
        -32602
    );
    assert_eq!(db.calls(), 0, "refused arguments create no call");

    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"nope"}]"#;
    let (status, answers) = raw(batch, None);
    assert_eq!(status, 200, "2025-03-26 allows batches");
    assert_eq!(answers.as_array().unwrap().len(), 2, "{answers}");
    assert_eq!(
        (
            answers[0]["id"].clone(),
            answers[1]["error"]["code"].clone()
        ),
        (json!(1), json!(-32601))
    );
    for version in ["2025-06-18", "2025-11-25"] {
        let (status, refused) = raw(batch, Some(version));
        assert_eq!(
            (status, refused["error"]["code"].clone()),
            (400, json!(-32600)),
            "{version}"
        );
    }
    let get = server.call("GET", "/mcp", &[], None);
    assert_eq!((get.status, get.header("Allow")), (405, Some("POST")));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let foreign = server.call(
        "POST",
        "/mcp",
        &[("Origin", "https://evil.example")],
        Some(&body),
    );
    assert_eq!(foreign.status, 403);
}

/// A call still running at `--mcp-wait-secs` answers a non-error result with
/// its status and `call_id`; `get_tool_call` reads it by that handle (and
/// can wait for it); the same key re-sent attaches to the same call.
#[test]
fn a_slow_call_answers_its_handle_and_get_tool_call_reads_it() {
    let (db, server) = start(&["--mcp-wait-secs", "0.2"]);
    let client = Client::new(&server, Some("2025-11-25"));
    let slow = client.call("sleep", json!({"seconds": 2}), Some("slow-1"));
    assert_eq!(slow["isError"], false);
    let slow = outcome(&slow);
    assert!(
        matches!(slow["status"].as_str(), Some("pending" | "running")),
        "{slow}"
    );
    assert!(slow.get("result").is_none());
    let again = outcome(&client.call("sleep", json!({"seconds": 2}), Some("slow-1")));
    assert_eq!(again["call_id"], slow["call_id"]);
    let read = client.call(
        "get_tool_call",
        json!({"call_id": slow["call_id"], "wait_secs": 20}),
        None,
    );
    let read = outcome(&read);
    assert_eq!(read["status"], "succeeded", "{read}");
    assert_eq!(read["call_id"], slow["call_id"]);
    assert_eq!(db.calls(), 1);
    let missing = client.call(
        "get_tool_call",
        json!({"call_id": "c_0000000000000000"}),
        None,
    );
    assert_eq!(missing["isError"], true);
    assert!(missing["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("not_found"));
}

/// `/mcp` takes the same bearer tokens (`401` with `WWW-Authenticate`
/// without one), and a call runs in its token's tenant: another tenant's
/// handle reads as not found, and its key is another key.
#[test]
fn auth_applies_and_a_call_belongs_to_its_tenant() {
    let auth = AuthFile::new(&[
        ("acme", "acme-token", false),
        ("globex", "globex-token", false),
    ]);
    let (db, server) = start(&["--auth-file", auth.path_str()]);
    let anonymous = Client::new(&server, Some("2025-11-25"))
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    assert_eq!(anonymous.status, 401);
    assert!(anonymous.header("WWW-Authenticate").is_some());
    let mut acme = Client::new(&server, Some("2025-11-25"));
    acme.token = Some("acme-token");
    let mut globex = Client::new(&server, Some("2025-11-25"));
    globex.token = Some("globex-token");
    let call = outcome(&acme.call("charge", json!({"amount": 9}), Some("shared-key")));
    let read = globex.call("get_tool_call", json!({"call_id": call["call_id"]}), None);
    assert_eq!(read["isError"], true, "{read}");
    let other = outcome(&globex.call("charge", json!({"amount": 9}), Some("shared-key")));
    assert_ne!(other["call_id"], call["call_id"]);
    assert_eq!(other["replayed"], false);
    assert_eq!(db.count("SELECT count(DISTINCT tenant) FROM calls"), 2);
}

/// MCP calls are counted under `transport="mcp"` and audited like any call.
#[test]
fn mcp_calls_are_labelled_in_metrics_and_audited() {
    let (_db, server) = start(&[]);
    let client = Client::new(&server, Some("2025-11-25"));
    let call = outcome(&client.call("charge", json!({"amount": 2}), Some("m-1")));
    client.call("charge", json!({"amount": 2}), Some("m-1"));
    let text = String::from_utf8(server.call("GET", "/metrics", &[], None).body).unwrap();
    let scrape = crate::support::exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let value = |transport: &str, outcome: &str| {
        let labels = [("transport", transport), ("outcome", outcome)];
        scrape.value("idempotent_tool_submissions_total", &labels)
    };
    assert_eq!(value("mcp", "created"), Some(1.0), "{text}");
    assert_eq!(value("mcp", "replayed"), Some(1.0));
    assert_eq!(value("http", "created"), Some(0.0));
    let labels = [("route", "/mcp"), ("status_class", "2xx")];
    assert_eq!(
        scrape.value("idempotent_tool_http_requests_total", &labels),
        Some(2.0)
    );
    let path = format!("/v1/tool-calls/{}/audit", call["call_id"].as_str().unwrap());
    let (status, audit) = server.get(&path);
    assert_eq!(status, 200);
    let events: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"created"));
    assert!(events.contains(&"succeeded"), "{events:?}");
    assert!(server.stderr().contains("\"transport\":\"mcp\""));
}
