//! Which MCP revision a request speaks, and the methods that establish it:
//! `initialize` (the handshake revisions 2025-03-26, 2025-06-18, 2025-11-25,
//! with version negotiation), `server/discover` (the stateless 2026-07-28
//! revision, where every request names its version in `_meta`), and `ping`.
//!
//! No session state is kept: a handshake revision's later requests name their
//! version in the `MCP-Protocol-Version` header (absent: 2025-03-26, as the
//! 2025-06-18 transport allows), and a stateless request in `_meta` and the
//! header, which must agree. No `Mcp-Session-Id` is issued, and one sent is
//! ignored. This file never touches a call.

use super::jsonrpc::{HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION};
use serde_json::{json, Map, Value};

/// The `_meta` key of a stateless request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key a stateless result names this server under.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The Tasks extension (SEP-2663), advertised under
/// `capabilities.extensions` and negotiated per request.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` key of a stateless request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The revisions this server speaks, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Revision {
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    /// Stateless: no handshake, version and capabilities in each `_meta`.
    V2026_07_28,
}

/// Newest first: the order `supported` lists are given in.
pub const SUPPORTED: [Revision; 4] = [
    Revision::V2026_07_28,
    Revision::V2025_11_25,
    Revision::V2025_06_18,
    Revision::V2025_03_26,
];

impl Revision {
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::V2025_03_26 => "2025-03-26",
            Revision::V2025_06_18 => "2025-06-18",
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }

    pub fn parse(text: &str) -> Option<Revision> {
        SUPPORTED.into_iter().find(|r| r.as_str() == text)
    }

    /// No handshake: results carry `resultType` and the server's `_meta`.
    pub fn is_stateless(self) -> bool {
        self == Revision::V2026_07_28
    }

    /// Structured tool output (`outputSchema`, `structuredContent`) and
    /// tool titles arrived in 2025-06-18.
    pub fn has_structured_output(self) -> bool {
        self >= Revision::V2025_06_18
    }

    /// JSON-RPC batches were allowed only in 2025-03-26.
    pub fn allows_batches(self) -> bool {
        self == Revision::V2025_03_26
    }

    /// Since 2025-11-25, arguments that fail the tool's schema are a tool
    /// execution error (`isError`), which a model can read and correct;
    /// before, a protocol error (`-32602`).
    pub fn schema_failure_is_tool_error(self) -> bool {
        self >= Revision::V2025_11_25
    }
}

/// Why a request cannot be served under any revision; always a `400`.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

fn unsupported(requested: &str) -> Refused {
    let supported: Vec<&str> = SUPPORTED.iter().map(|r| r.as_str()).collect();
    Refused {
        code: UNSUPPORTED_PROTOCOL_VERSION,
        message: format!(
            "Unsupported protocol version {}",
            crate::input::quote(requested)
        ),
        data: Some(json!({"supported": supported, "requested": requested})),
    }
}

fn mismatch(message: String) -> Refused {
    Refused {
        code: HEADER_MISMATCH,
        message,
        data: None,
    }
}

/// Whether a request speaks the stateless revision's way (its version in
/// `_meta`, or the header naming 2026-07-28): then even `initialize` is held
/// to its rules (and is no method there).
pub fn names_stateless(params: &Map<String, Value>, header: Option<&str>) -> bool {
    params
        .get("_meta")
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .is_some()
        || header
            .and_then(Revision::parse)
            .is_some_and(Revision::is_stateless)
}

/// The revision of a request other than `initialize`. A stateless request
/// (the `MCP-Protocol-Version` header names 2026-07-28, or `_meta` names a
/// version) is held to 2026-07-28's order: the header present (`-32020`),
/// `_meta` carrying the version and the client's capabilities (`-32602`),
/// the two versions equal (`-32020`), the version one this server speaks
/// (`-32022`). Otherwise the header names a handshake revision (absent:
/// 2025-03-26).
pub fn revision_of(params: &Map<String, Value>, header: Option<&str>) -> Result<Revision, Refused> {
    let meta = params.get("_meta");
    let in_meta = meta.and_then(|m| m.get(META_PROTOCOL_VERSION));
    let stateless_header = header
        .and_then(Revision::parse)
        .is_some_and(Revision::is_stateless);
    if in_meta.is_some() || stateless_header {
        return stateless_revision(meta, header);
    }
    match header {
        None => Ok(Revision::V2025_03_26),
        Some(h) => Revision::parse(h).ok_or_else(|| unsupported(h)),
    }
}

/// A request that carries its version in `_meta`, checked in the order the
/// 2026-07-28 transport gives.
fn stateless_revision(meta: Option<&Value>, header: Option<&str>) -> Result<Revision, Refused> {
    let Some(header) = header else {
        return Err(mismatch(
            "Header mismatch: the MCP-Protocol-Version header is required".into(),
        ));
    };
    let field = |key: &str| meta.and_then(|m| m.get(key));
    let missing: Vec<&str> = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES]
        .into_iter()
        .filter(|key| field(key).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(invalid_meta(format!(
            "Invalid params: _meta is missing {}",
            missing.join(", ")
        )));
    }
    if !field(META_CLIENT_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(invalid_meta(format!(
            "Invalid params: _meta.{META_CLIENT_CAPABILITIES} must be an object"
        )));
    }
    let Some(version) = field(META_PROTOCOL_VERSION).and_then(Value::as_str) else {
        return Err(invalid_meta(format!(
            "Invalid params: _meta.{META_PROTOCOL_VERSION} must be a string"
        )));
    };
    if version != header {
        return Err(mismatch(format!(
            "Header mismatch: MCP-Protocol-Version {} does not match _meta {}",
            crate::input::quote(header),
            crate::input::quote(version)
        )));
    }
    Revision::parse(version).ok_or_else(|| unsupported(version))
}

fn invalid_meta(message: String) -> Refused {
    Refused {
        code: INVALID_PARAMS,
        message,
        data: None,
    }
}

/// 2026-07-28's mirrored headers: `Mcp-Method` always, `Mcp-Name` for
/// `tools/call` and the `tasks/*` methods; each must be present and equal
/// the body's value.
pub fn check_mirrored_headers(
    method: &str,
    params: &Map<String, Value>,
    mcp_method: Option<&str>,
    mcp_name: Option<&str>,
) -> Result<(), Refused> {
    if mcp_method != Some(method) {
        return Err(mismatch(format!(
            "Header mismatch: Mcp-Method must be present and equal the body's method {}",
            crate::input::quote(method)
        )));
    }
    if let Some(field) = named_by(method) {
        let body_name = params.get(field).and_then(Value::as_str).unwrap_or("");
        // An undecodable value matches no name.
        let header_name = mcp_name.and_then(super::param_headers::decode);
        if header_name.as_deref() != Some(body_name) {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Name must be present and equal params.{field} {}",
                crate::input::quote(body_name)
            )));
        }
    }
    Ok(())
}

/// The body field a method's `Mcp-Name` header mirrors: a tool's name, or
/// a task's id (the Tasks extension's routing header).
fn named_by(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" => Some("name"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// What this server says about itself.
pub fn server_info() -> Value {
    json!({"name": "idempotent-tool", "version": env!("CARGO_PKG_VERSION")})
}

/// Guidance for the model, in `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "Every tools/call runs at most once per idempotency key. \
Send the same key (in _meta \"dev.idempotent-tool/idempotency-key\" or params.idempotencyKey) \
when you retry a call whose answer you did not get: you get the original outcome, never a second \
effect. A call still running answers status \"running\" with its call_id: poll it with \
get_tool_call instead of calling the tool again.";

/// `initialize`: the client's version when this server speaks it as a
/// handshake revision, else the newest handshake revision (the client then
/// decides whether it can continue).
pub fn initialize(params: &Map<String, Value>) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let negotiated = match requested.and_then(Revision::parse) {
        Some(r) if !r.is_stateless() => r,
        _ => Revision::V2025_11_25,
    };
    json!({
        "protocolVersion": negotiated.as_str(),
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

/// `server/discover`: every version, the capabilities, the guidance.
pub fn discover() -> Value {
    let supported: Vec<&str> = SUPPORTED.iter().map(|r| r.as_str()).collect();
    json!({
        "supportedVersions": supported,
        "capabilities": {
            "tools": {"listChanged": false},
            "extensions": {TASKS_EXTENSION: {}},
        },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
        "ttlMs": 0,
        "cacheScope": "private",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: &str) -> Map<String, Value> {
        json!({"_meta": {META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {}}})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn the_revision_comes_from_meta_or_the_header() {
        let none = Map::new();
        assert_eq!(revision_of(&none, None), Ok(Revision::V2025_03_26));
        assert_eq!(
            revision_of(&none, Some("2025-06-18")),
            Ok(Revision::V2025_06_18)
        );
        assert_eq!(
            revision_of(&meta("2026-07-28"), Some("2026-07-28")),
            Ok(Revision::V2026_07_28)
        );
        let refused =
            |params: &Map<String, Value>, header| revision_of(params, header).unwrap_err();
        assert_eq!(
            refused(&none, Some("1999-01-01")).code,
            UNSUPPORTED_PROTOCOL_VERSION
        );
        assert_eq!(refused(&none, Some("2026-07-28")).code, INVALID_PARAMS);
        let no_capabilities = json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}});
        let no_capabilities = no_capabilities.as_object().unwrap();
        assert_eq!(
            refused(no_capabilities, Some("2026-07-28")).code,
            INVALID_PARAMS
        );
        // The header and _meta disagree: a mismatch, whatever _meta names.
        assert_eq!(
            refused(&meta("3000-01-01"), Some("2026-07-28")).code,
            HEADER_MISMATCH
        );
        assert_eq!(refused(&meta("2026-07-28"), None).code, HEADER_MISMATCH);
        assert_eq!(
            refused(&meta("2026-07-28"), Some("2025-11-25")).code,
            HEADER_MISMATCH
        );
        let unknown = refused(&meta("3000-01-01"), Some("3000-01-01"));
        assert_eq!(unknown.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(unknown.data.unwrap()["requested"], "3000-01-01");
    }

    #[test]
    fn initialize_echoes_a_known_handshake_version_else_offers_the_newest() {
        for (asked, answered) in [
            ("2025-03-26", "2025-03-26"),
            ("2025-06-18", "2025-06-18"),
            ("2025-11-25", "2025-11-25"),
            ("2024-11-05", "2025-11-25"),
            ("2026-07-28", "2025-11-25"),
        ] {
            let params = json!({"protocolVersion": asked})
                .as_object()
                .unwrap()
                .clone();
            assert_eq!(initialize(&params)["protocolVersion"], answered, "{asked}");
        }
    }

    #[test]
    fn mirrored_headers_must_match_the_body() {
        let call = json!({"name": "charge"}).as_object().unwrap().clone();
        assert!(
            check_mirrored_headers("tools/call", &call, Some("tools/call"), Some("charge")).is_ok()
        );
        let encoded = "=?base64?Y2hhcmdl?=";
        assert!(
            check_mirrored_headers("tools/call", &call, Some("tools/call"), Some(encoded)).is_ok()
        );
        assert!(check_mirrored_headers("tools/call", &call, Some("tools/call"), None).is_err());
        assert!(
            check_mirrored_headers("tools/call", &call, Some("tools/call"), Some("sleep")).is_err()
        );
        assert!(check_mirrored_headers("tools/list", &call, None, None).is_err());
        assert!(check_mirrored_headers("tools/list", &call, Some("tools/list"), None).is_ok());
    }
}
