//! `openapi.yaml` held to the running service (in this process): every route
//! the router knows is described (and every described path is routed), every
//! `ErrorCode` is in the document with its status, every header the server
//! sends is declared where it sends it (and every required one is sent), and
//! the responses of a running service — successes, replays, conflicts, 4xx of
//! every kind, the server's own answer to bad framing — validate against the
//! document's schemas (JSON Schema 2020-12, as OpenAPI 3.1 uses).

use crate::support;

use crate::support::openapi::{deref, operations, spec};
use crate::support::raw::RawClient;
use crate::support::Http;
use crate::support::{charge, AuthFile, Local, TempDb};
use idempotent_tool::api::ROUTES;
use idempotent_tool::client::HttpResponse;
use idempotent_tool::http::ErrorCode;
use idempotent_tool::tools::ToolErrorCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Described but not routed by this build (none: every path is routed).
const NOT_YET_ROUTED: &[&str] = &[];

/// Headers the writer adds itself (framing), never declared per response.
const FRAMING: &[&str] = &["content-length", "connection", "content-type"];

/// `{call_id}` and `{key}` filled in, so the router sees a real path.
fn concrete(template: &str) -> String {
    template
        .replace("{call_id}", "c_0000000000000000")
        .replace("{key}", "no-such-key")
        .replace("{asset}", "app.js")
}

/// Every route the router knows is in the document, and every path in the
/// document is routed: the live server answers each listed route (never a
/// `404` for the path itself), and answers a wrong method with `405` whose
/// `Allow` is exactly the document's methods for that path.
#[test]
fn the_document_and_the_router_describe_the_same_routes() {
    let spec = spec();
    let described: BTreeSet<(String, String)> = operations(&spec)
        .into_iter()
        .map(|(path, method, _)| (method.to_uppercase(), path))
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(method, path)| (method.to_string(), path.to_string()))
        .collect();
    let unrouted: Vec<_> = described
        .difference(&routed)
        .filter(|(_, path)| !NOT_YET_ROUTED.contains(&path.as_str()))
        .collect();
    assert!(unrouted.is_empty(), "described, not routed: {unrouted:?}");
    let undescribed: Vec<_> = routed.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "routed, not described: {undescribed:?}"
    );

    let db = TempDb::new("openapi-routes");
    let server = Local::start(&db, &[]);
    for (method, template) in ROUTES {
        let path = concrete(template);
        let response = server.call(method, &path, &[], None);
        let message = response.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            !(response.status == 404 && message.starts_with("path")),
            "{method} {template}: the router does not know it"
        );
        let wrong = server.call("PUT", &path, &[], None);
        assert_eq!(wrong.status, 405, "PUT {template}");
        let allowed: BTreeSet<String> = spec["paths"][*template]
            .as_object()
            .unwrap()
            .keys()
            .filter(|m| support::openapi::METHODS.contains(&m.as_str()))
            .map(|m| m.to_uppercase())
            .collect();
        let allow: BTreeSet<String> = wrong
            .header("Allow")
            .unwrap_or_default()
            .split(", ")
            .map(String::from)
            .collect();
        assert_eq!(allow, allowed, "Allow of {template}");
    }
    assert_eq!(server.call("GET", "/not/a/route", &[], None).status, 404);
}

/// Every `ErrorCode` is in the document's `ErrorCode` enum, and some
/// response of its status shows it; the document lists no code the server
/// lacks (but `retry_exhausted`, which only the client prints).
#[test]
fn every_error_code_is_documented_with_its_status() {
    let spec = spec();
    let enumerated: BTreeSet<String> = spec["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str().map(String::from))
        .collect();
    let known: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    let extra: Vec<_> = enumerated
        .difference(&known)
        .filter(|c| *c != "retry_exhausted")
        .collect();
    assert!(
        extra.is_empty(),
        "documented, unknown to the server: {extra:?}"
    );
    let text = serde_json::to_string(&spec).unwrap();
    for code in ErrorCode::ALL {
        assert!(
            enumerated.contains(code.as_str()),
            "{code} not in ErrorCode"
        );
        let status = code.status().to_string();
        let shown = operations(&spec).iter().any(|(_, _, op)| {
            op["responses"].get(&status).is_some_and(|r| {
                serde_json::to_string(deref(&spec, r))
                    .unwrap()
                    .contains(code.as_str())
            })
        });
        assert!(shown, "no {status} response shows {code}");
    }
    assert!(text.contains("WWW-Authenticate"));
}

/// The document's `ToolErrorCode` enum is exactly `ToolErrorCode::ALL`, in
/// its order, and a call's `error.code` is declared with it.
#[test]
fn every_tool_error_code_is_documented() {
    let spec = spec();
    let schemas = &spec["components"]["schemas"];
    let enumerated: Vec<&str> = schemas["ToolErrorCode"]["enum"]
        .as_array()
        .expect("a ToolErrorCode enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let known: Vec<&str> = ToolErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(enumerated, known);
    assert_eq!(
        schemas["ToolError"]["properties"]["code"]["$ref"],
        "#/components/schemas/ToolErrorCode"
    );
}

/// One request a sample makes: for which operation of the document, and
/// what the server answered.
struct Sample {
    template: &'static str,
    method: &'static str,
    response: HttpResponse,
}

/// A server with two tenants, and a response of every kind it gives.
fn samples(server: &Local) -> Vec<Sample> {
    let acme = [("Authorization", "Bearer acme-token")];
    let ops = [("Authorization", "Bearer ops-token")];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        acme.iter().chain(extra).copied().collect()
    };
    let post = |key: &'static str, body: &Value| {
        let headers = with(&[("Idempotency-Key", key)]);
        server.call("POST", "/v1/tool-calls", &headers, Some(&body.to_string()))
    };
    let mut out = Vec::new();
    let mut push = |template, method, response| {
        out.push(Sample {
            template,
            method,
            response,
        })
    };
    let created = post(
        "s-1",
        &json!({"tool": "sleep", "args": {"seconds": 0.2}, "client_id": "c", "seq": 1}),
    );
    let id = created.json()["call_id"].as_str().unwrap().to_string();
    push("/v1/tool-calls", "post", created);
    push(
        "/v1/tool-calls",
        "post",
        post(
            "s-1",
            &json!({"tool": "sleep", "args": {"seconds": 0.2}, "client_id": "c", "seq": 1}),
        ),
    );
    let get = |path: &str| server.call("GET", path, &acme, None);
    push(
        "/v1/tool-calls/{call_id}",
        "get",
        get(&format!("/v1/tool-calls/{id}")),
    );
    push(
        "/v1/tool-calls/{call_id}",
        "get",
        get(&format!("/v1/tool-calls/{id}?wait=10")),
    );
    push(
        "/v1/tool-calls",
        "post",
        post(
            "s-1",
            &json!({"tool": "sleep", "args": {"seconds": 0.2}, "client_id": "c", "seq": 1}),
        ),
    );
    push("/v1/tool-calls", "post", post("s-1", &charge(1)));
    push(
        "/v1/tool-calls",
        "post",
        server.call("POST", "/v1/tool-calls", &acme, Some("{}")),
    );
    push(
        "/v1/tool-calls",
        "post",
        post("s-2", &json!({"tool": "nope"})),
    );
    push(
        "/v1/tool-calls",
        "post",
        server.call(
            "POST",
            "/v1/tool-calls",
            &[("Idempotency-Key", "s-3")],
            Some("{}"),
        ),
    );
    push(
        "/v1/tool-calls",
        "post",
        server.call("DELETE", "/v1/tool-calls", &acme, None),
    );
    for (path, who) in [
        ("/v1/tool-calls", &acme),
        ("/v1/tool-calls?status=succeeded&limit=1", &acme),
        ("/v1/tool-calls?tenant=*&key_prefix=s-", &ops),
        ("/v1/tool-calls?status=done", &acme),
        ("/v1/tool-calls?tenant=*", &acme),
    ] {
        push("/v1/tool-calls", "get", server.call("GET", path, who, None));
    }
    for (path, who) in [
        ("/v1/overview", &acme),
        ("/v1/overview?tenant=*", &ops),
        ("/v1/overview?tenant=*", &acme),
        ("/v1/overview?x=1", &acme),
    ] {
        push("/v1/overview", "get", server.call("GET", path, who, None));
    }
    push(
        "/v1/nodes",
        "get",
        server.call("GET", "/v1/nodes", &ops, None),
    );
    push("/v1/nodes", "get", get("/v1/nodes"));
    push(
        "/v1/tool-calls/by-key/{key}",
        "get",
        get("/v1/tool-calls/by-key/s-1"),
    );
    push(
        "/v1/tool-calls/by-key/{key}",
        "get",
        get("/v1/tool-calls/by-key/none"),
    );
    push(
        "/v1/tool-calls/{call_id}",
        "get",
        get("/v1/tool-calls/c_0000000000000000"),
    );
    push(
        "/v1/tool-calls/{call_id}",
        "get",
        get(&format!("/v1/tool-calls/{id}?wait=x")),
    );
    push(
        "/v1/tool-calls/{call_id}/audit",
        "get",
        get(&format!("/v1/tool-calls/{id}/audit")),
    );
    push(
        "/v1/tool-calls/{call_id}/audit",
        "get",
        get("/v1/tool-calls/c_0000000000000000/audit"),
    );
    let cancel = |path: &str, body: Option<&str>| server.call("POST", path, &acme, body);
    let running = post(
        "s-cancel",
        &json!({"tool": "sleep", "args": {"seconds": 5}}),
    );
    let running = running.json()["call_id"].as_str().unwrap().to_string();
    let cancel_path = format!("/v1/tool-calls/{running}/cancel");
    let template = "/v1/tool-calls/{call_id}/cancel";
    push(
        template,
        "post",
        cancel(&format!("{cancel_path}?wait=0"), None),
    );
    push(
        template,
        "post",
        cancel(&cancel_path, Some(r#"{"reason":"r"}"#)),
    );
    push(
        template,
        "post",
        cancel(&format!("/v1/tool-calls/{id}/cancel"), None),
    );
    push(
        template,
        "post",
        cancel("/v1/tool-calls/c_0000000000000000/cancel", None),
    );
    push(template, "post", cancel(&cancel_path, Some(r#"{"why":1}"#)));
    push(
        template,
        "post",
        server.call("GET", &cancel_path, &acme, None),
    );
    // Approval gates: `send_email` waits for a decision in this server.
    let gated = post(
        "s-gated",
        &json!({"tool": "send_email", "args": {"to": "a@example.com"}}),
    );
    let gated = gated.json()["call_id"].as_str().unwrap().to_string();
    push(
        "/v1/approvals",
        "get",
        server.call("GET", "/v1/approvals", &acme, None),
    );
    push(
        "/v1/approvals",
        "get",
        server.call("GET", "/v1/approvals?limit=0", &acme, None),
    );
    let request_path = format!("/v1/tool-calls/{gated}/approval");
    let template = "/v1/tool-calls/{call_id}/approval";
    push(template, "get", get(&request_path));
    push(
        template,
        "get",
        get(&format!("/v1/tool-calls/{id}/approval")),
    );
    let approve_path = format!("/v1/tool-calls/{gated}/approve");
    let decide = |path: &str, who: &[(&'static str, &'static str)], body: &str| {
        server.call("POST", path, who, Some(body))
    };
    let template = "/v1/tool-calls/{call_id}/approve";
    push(template, "post", decide(&approve_path, &acme, "{}"));
    let wrong = format!(r#"{{"fingerprint":"{}"}}"#, "0".repeat(64));
    push(template, "post", decide(&approve_path, &ops, &wrong));
    push(
        "/v1/tool-calls/{call_id}/deny",
        "post",
        decide(&format!("/v1/tool-calls/{gated}/deny"), &ops, "{}"),
    );
    push(
        template,
        "post",
        decide(&approve_path, &ops, r#"{"reason":"ok"}"#),
    );
    push(template, "post", decide(&approve_path, &ops, "{}"));
    push("/stats", "get", get("/stats"));
    push("/stats", "get", get("/stats?scope=all"));
    push(
        "/stats",
        "get",
        server.call("GET", "/stats?scope=all", &ops, None),
    );
    push(
        "/stats",
        "get",
        server.call("GET", "/stats", &[("Authorization", "Bearer wrong")], None),
    );
    push(
        "/metrics",
        "get",
        server.call("GET", "/metrics", &ops, None),
    );
    push("/metrics", "get", get("/metrics"));
    push("/healthz", "get", server.call("GET", "/healthz", &[], None));
    push(
        "/healthz",
        "get",
        server.call("POST", "/healthz", &[], None),
    );
    push("/openapi.yaml", "get", get("/openapi.yaml"));
    let mcp = |extra: &[(&'static str, &'static str)], body: &str| {
        server.call("POST", "/mcp", &with(extra), Some(body))
    };
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "charge", "arguments": {"amount": 3},
                   "_meta": {"dev.idempotent-tool/idempotency-key": "s-mcp"}}});
    push(
        "/mcp",
        "post",
        mcp(&[("MCP-Protocol-Version", "2025-11-25")], &call.to_string()),
    );
    push("/mcp", "post", mcp(&[], "{not json"));
    push(
        "/mcp",
        "post",
        mcp(&[("Origin", "https://evil.example")], &call.to_string()),
    );
    let stateless = json!({"jsonrpc": "2.0", "id": 2, "method": "nope",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    push(
        "/mcp",
        "post",
        mcp(
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "nope"),
            ],
            &stateless.to_string(),
        ),
    );
    push(
        "/v1/verify",
        "get",
        server.call("GET", "/v1/verify", &ops, None),
    );
    push("/v1/verify", "get", get("/v1/verify"));
    push(
        "/v1/verify",
        "get",
        server.call("GET", "/v1/verify?timeout_s=x", &ops, None),
    );
    push("/ui", "get", server.call("GET", "/ui", &[], None));
    for asset in ["app.js", "app.css", "favicon.svg", "calls", "nope.js"] {
        let path = format!("/ui/{asset}");
        push("/ui/{asset}", "get", server.call("GET", &path, &[], None));
    }
    let mut raw = RawClient::connect(server.addr());
    raw.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n");
    push("/healthz", "get", raw.reply());
    out
}

/// JSON Schema 2020-12 validation of `instance` against `schema`, with the
/// document's `components` beside it so that `$ref`s resolve.
fn schema_errors(spec: &Value, schema: &Value, instance: &Value) -> Vec<String> {
    let mut wrapped = schema.clone();
    wrapped["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    wrapped["components"] = spec["components"].clone();
    let validator = jsonschema::validator_for(&wrapped)
        .unwrap_or_else(|e| panic!("schema does not compile: {e}\n{schema}"));
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

/// Each sample's status is documented for its operation; its headers are
/// the declared ones (every required header present, nothing undeclared
/// but framing); its `Content-Type` is a documented media type; and its
/// body validates against that media type's schema.
#[test]
fn live_responses_match_the_document() {
    let spec = spec();
    let db = TempDb::new("openapi-live");
    let auth = AuthFile::new(&[("acme", "acme-token", false), ("ops", "ops-token", true)]);
    let tools = crate::support::downstream::ToolsFile::write(&json!({"tools": {
        "charge": {"kind": "builtin"}, "fail": {"kind": "builtin"}, "sleep": {"kind": "builtin"},
        "send_email": {"kind": "builtin", "approval": {"when": "always"}},
    }}));
    let server = Local::start(
        &db,
        &["--auth-file", auth.path_str(), "--tools", tools.path_str()],
    );
    let mut statuses = BTreeSet::new();
    let mut headers_seen = BTreeSet::new();
    for sample in samples(&server) {
        let (template, method, response) = (sample.template, sample.method, &sample.response);
        let place = format!("{method} {template} {}", response.status);
        statuses.insert(response.status);
        let operation = &spec["paths"][template][method];
        let documented = operation["responses"]
            .get(response.status.to_string())
            .unwrap_or_else(|| panic!("{place}: status not documented"));
        let documented = deref(&spec, documented);
        let declared = documented["headers"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, _) in &response.headers {
            headers_seen.insert(name.to_ascii_lowercase());
            if FRAMING.contains(&name.to_ascii_lowercase().as_str()) {
                continue;
            }
            assert!(
                declared.keys().any(|d| d.eq_ignore_ascii_case(name)),
                "{place}: header {name} is not declared"
            );
        }
        for (name, header) in &declared {
            let header = deref(&spec, header);
            if header["required"] == true {
                assert!(response.header(name).is_some(), "{place}: {name} missing");
            }
        }
        let content_type = response.header("Content-Type").expect("a Content-Type");
        let media = documented["content"]
            .get(content_type)
            .unwrap_or_else(|| panic!("{place}: {content_type} not documented"));
        if content_type == "application/json" {
            let body: Value = serde_json::from_slice(&response.body).expect("JSON");
            let errors = schema_errors(&spec, &media["schema"], &body);
            assert!(errors.is_empty(), "{place}: {errors:?}\n{body}");
        } else {
            let text = String::from_utf8(response.body.clone()).expect("text");
            assert!(!text.is_empty(), "{place}");
        }
    }
    for status in [200, 202, 400, 401, 403, 404, 405, 409, 501] {
        assert!(
            statuses.contains(&status),
            "no sample answered {status}: {statuses:?}"
        );
    }
    let declared: BTreeSet<String> = spec["components"]["headers"]
        .as_object()
        .unwrap()
        .keys()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    for header in &headers_seen {
        assert!(
            declared.contains(header) || FRAMING.contains(&header.as_str()),
            "the server sends {header}, which the document never declares"
        );
    }
    for header in [
        "x-request-id",
        "location",
        "idempotent-replayed",
        "retry-after",
        "allow",
        "www-authenticate",
    ] {
        assert!(headers_seen.contains(header), "no sample carried {header}");
    }
    // The validator does validate: a call without its id, or an error
    // without its code, is refused.
    let call = json!({"$ref": "#/components/schemas/Call"});
    let (_, body) = server.request(
        "GET",
        "/v1/tool-calls/by-key/s-1",
        &[("Authorization", "Bearer acme-token")],
        None,
    );
    assert!(schema_errors(&spec, &call, &body).is_empty(), "{body}");
    let mut broken = body.clone();
    broken.as_object_mut().unwrap().remove("call_id");
    assert!(!schema_errors(&spec, &call, &broken).is_empty());
    let error = json!({"$ref": "#/components/schemas/Error"});
    assert!(!schema_errors(
        &spec,
        &error,
        &json!({"error": {"code": "nope", "message": "m"}})
    )
    .is_empty());
    let served = server.call(
        "GET",
        "/openapi.yaml",
        &[("Authorization", "Bearer acme-token")],
        None,
    );
    let file = std::fs::read(format!("{}/openapi.yaml", support::openapi::ROOT)).unwrap();
    assert_eq!(
        served.body, file,
        "/openapi.yaml serves the repository's file"
    );
}
