//! One MCP request as a 2026-07-28 client sends it: the version and the
//! client's capabilities in `_meta`, the mirrored `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` headers, an optional bearer token; the whole
//! JSON-RPC answer back.

use super::{Http, Server};
use serde_json::{json, Value};

/// `method` with `params` to `server`'s `/mcp`, declaring `capabilities`.
pub fn rpc(
    server: &Server,
    token: Option<&str>,
    capabilities: &Value,
    method: &str,
    mut params: Value,
) -> Value {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2026-07-28".into();
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities.clone();
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(str::to_string);
    let mut headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("MCP-Protocol-Version".into(), "2026-07-28".into()),
        ("Mcp-Method".into(), method.into()),
    ];
    if let Some(name) = name {
        headers.push(("Mcp-Name".into(), name));
    }
    if let Some(token) = token {
        headers.push(("Authorization".into(), format!("Bearer {token}")));
    }
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    server
        .call("POST", "/mcp", &headers, Some(&body.to_string()))
        .json()
}
