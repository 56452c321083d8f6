//! SEP-2243's custom headers against the real binary (2026-07-28): a tool
//! whose input schema marks `region` with `"x-mcp-header": "Region"` runs
//! only when `Mcp-Param-Region` mirrors the argument, as text or padded
//! `=?base64?…?=`; a missing, different or undecodable header is
//! `400 -32020` and no call is made.

use crate::support::{Http, Server, TempDb};
use serde_json::{json, Value};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp-conformance/tools.json"
);

/// `route_by_region` called with `region`, and `param` as
/// `Mcp-Param-Region` when given: the HTTP status and the JSON-RPC answer.
fn call(server: &Server, region: &str, param: Option<&str>) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "route_by_region", "arguments": {"region": region},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "route_by_region"),
    ];
    if let Some(param) = param {
        headers.push(("mcp-param-REGION", param));
    }
    let answer = server.call("POST", "/mcp", &headers, Some(&body.to_string()));
    (answer.status, answer.json())
}

/// Mirrored (in any case of the header's name, as text or Base64) the call
/// runs; otherwise `400 -32020` and nothing is created.
#[test]
fn a_marked_argument_must_be_mirrored_in_its_header() {
    let db = TempDb::new("mcp-param-headers");
    let server = Server::start(&db, &["--tools", FIXTURES]);
    let listed = server.call(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        Some(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#),
    );
    let tools = listed.json()["result"]["tools"].clone();
    let tool = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "route_by_region")
        .expect("listed");
    assert_eq!(
        tool["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region"
    );

    for (region, param) in [
        ("eu-west", Some("eu-west")),
        ("Hello", Some("=?base64?SGVsbG8=?=")),
    ] {
        let (status, answer) = call(&server, region, param);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "routed", "{answer}");
    }
    let before = server.stats()["calls"].clone();
    let refused = [
        ("eu-west", None),
        ("eu-west", Some("us-east")),
        ("Hello", Some("=?base64?SGVsbG8?=")),
        ("Hello", Some("=?base64?SGVs!!!bG8=?=")),
    ];
    for (region, param) in refused {
        let (status, answer) = call(&server, region, param);
        assert_eq!(
            (status, &answer["error"]["code"]),
            (400, &json!(-32020)),
            "{param:?}: {answer}"
        );
    }
    assert_eq!(
        server.stats()["calls"],
        before,
        "no refused request made a call"
    );
}
