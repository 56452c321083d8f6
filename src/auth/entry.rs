//! One tenant's entry of the auth file: its own token and role, the named
//! tokens of its people with theirs, whether the MCP client that made a
//! call may decide its approval, and its webhook.
//!
//! ```json
//! "acme": {
//!   "token_sha256": "<64 hex>",          // the tenant's token: role caller unless said
//!   "role": "caller",                    // or "admin": true, as before roles existed
//!   "tokens": {"alice": {"token_sha256": "<64 hex>", "role": "approver"}},
//!   "mcp_client_may_approve": false,
//!   "webhook": {"url": "https://chat.example/hook", "secret_file": "acme.whsec"}
//! }
//! ```
//!
//! An entry written before roles (`token_sha256`, `admin`) keeps its
//! meaning: a caller, or an admin. Every field but those two is optional,
//! and `token_sha256` may be left out when `tokens` names at least one.
//! Unknown fields are refused. Messages name the tenant, the token and the
//! field, never a hash or a secret.

use super::role::Role;
use super::webhook::{self, WebhookTarget};
use super::{invalid, AuthFileError, Tenant};
use serde_json::{Map, Value};
use std::path::Path;
use std::sync::Arc;

/// The fields of a tenant's entry.
const ENTRY_FIELDS: &[&str] = &[
    "token_sha256",
    "admin",
    "role",
    "tokens",
    "mcp_client_may_approve",
    "webhook",
];

/// The fields of a named token.
const TOKEN_FIELDS: &[&str] = &["token_sha256", "role"];

/// One token and who presents it.
pub(super) struct Credential {
    pub(super) token_sha256: [u8; 32],
    pub(super) tenant: Tenant,
}

/// What a tenant's entry configures.
pub(super) struct Entry {
    pub(super) credentials: Vec<Credential>,
    pub(super) webhook: Option<WebhookTarget>,
}

/// Read tenant `name`'s entry; `base_dir` is where a relative
/// `webhook.secret_file` starts.
pub(super) fn parse(name: &str, value: &Value, base_dir: &Path) -> Result<Entry, AuthFileError> {
    let place = format!("tenant {name:?}");
    let entry = value.as_object().ok_or_else(|| {
        invalid(format!(
            "{place} must be an object {{\"token_sha256\": \"<hex>\", \"admin\"?: bool, \
             \"role\"?: ..., \"tokens\"?: {{...}}}}"
        ))
    })?;
    only_fields(entry, ENTRY_FIELDS, &place)?;
    let client_may_approve = match entry.get("mcp_client_may_approve") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(invalid(format!(
                "{place}: mcp_client_may_approve must be true or false"
            )))
        }
    };
    let webhook = entry
        .get("webhook")
        .map(|w| webhook::parse(w, base_dir).map_err(|why| invalid(format!("{place}: {why}"))))
        .transpose()?;
    let tenant = |role: Role, principal: &str| Tenant {
        name: Arc::from(name),
        admin: role == Role::Admin,
        role,
        principal: Arc::from(principal),
        client_may_approve,
        notify: webhook.is_some(),
    };
    let mut credentials = Vec::new();
    if let Some(hex) = entry.get("token_sha256") {
        let role = own_role(entry, &place)?;
        let token_sha256 = sha256(hex, &place)?;
        credentials.push(Credential {
            token_sha256,
            tenant: tenant(role, name),
        });
    } else if entry.contains_key("admin") || entry.contains_key("role") {
        return Err(invalid(format!(
            "{place}: admin and role are the tenant token's; give token_sha256 too"
        )));
    }
    for (person, token) in tokens(entry, &place)? {
        let place = format!("{place}, token {person:?}");
        check_token_name(person, &place)?;
        let token = token.as_object().ok_or_else(|| {
            invalid(format!(
                "{place} must be an object {{\"token_sha256\": \"<hex>\", \"role\"?: ...}}"
            ))
        })?;
        only_fields(token, TOKEN_FIELDS, &place)?;
        let hex = token
            .get("token_sha256")
            .ok_or_else(|| invalid(format!("{place}: token_sha256 is required")))?;
        let token_sha256 = sha256(hex, &place)?;
        let role = match token.get("role") {
            None => Role::Caller,
            Some(word) => role(word, &place)?,
        };
        credentials.push(Credential {
            token_sha256,
            tenant: tenant(role, person),
        });
    }
    if credentials.is_empty() {
        return Err(invalid(format!(
            "{place}: token_sha256 is required (or tokens naming at least one)"
        )));
    }
    Ok(Entry {
        credentials,
        webhook,
    })
}

/// The tenant token's role: `role`, or `admin` (both: they must agree).
fn own_role(entry: &Map<String, Value>, place: &str) -> Result<Role, AuthFileError> {
    let admin = match entry.get("admin") {
        None => None,
        Some(Value::Bool(admin)) => Some(*admin),
        Some(_) => return Err(invalid(format!("{place}: admin must be true or false"))),
    };
    let role = entry.get("role").map(|r| role(r, place)).transpose()?;
    match (admin, role) {
        (Some(true), None) => Ok(Role::Admin),
        (Some(false) | None, None) => Ok(Role::Caller),
        (None, Some(role)) => Ok(role),
        (Some(admin), Some(role)) if admin == (role == Role::Admin) => Ok(role),
        (Some(_), Some(role)) => Err(invalid(format!(
            "{place}: admin and role {role} disagree; give one of them"
        ))),
    }
}

fn role(word: &Value, place: &str) -> Result<Role, AuthFileError> {
    word.as_str().and_then(Role::parse).ok_or_else(|| {
        let every: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        invalid(format!("{place}: role must be one of {}", every.join(", ")))
    })
}

/// `tokens`, if given: an object of token name to entry.
fn tokens<'a>(
    entry: &'a Map<String, Value>,
    place: &str,
) -> Result<Vec<(&'a String, &'a Value)>, AuthFileError> {
    match entry.get("tokens") {
        None => Ok(Vec::new()),
        Some(Value::Object(tokens)) => Ok(tokens.iter().collect()),
        Some(_) => Err(invalid(format!(
            "{place}: tokens must be an object of token name to {{\"token_sha256\", \"role\"}}"
        ))),
    }
}

/// A token's name: what the audit records for its decisions, so the same
/// characters as a tenant's name.
fn check_token_name(name: &str, place: &str) -> Result<(), AuthFileError> {
    match super::is_tenant_name(name) {
        true => Ok(()),
        false => Err(invalid(format!(
            "{place}: a token name must be 1 to {} of A-Z a-z 0-9 _ . -",
            super::MAX_TENANT_NAME
        ))),
    }
}

fn sha256(hex: &Value, place: &str) -> Result<[u8; 32], AuthFileError> {
    let hex = hex
        .as_str()
        .ok_or_else(|| invalid(format!("{place}: token_sha256 must be a string")))?;
    parse_sha256_hex(hex).ok_or_else(|| {
        invalid(format!(
            "{place}: token_sha256 must be 64 hex digits (a SHA-256 of the token, not the token; got {} characters)",
            hex.chars().count()
        ))
    })
}

pub(super) fn only_fields(
    object: &Map<String, Value>,
    known: &[&str],
    place: &str,
) -> Result<(), AuthFileError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(field) => {
            let shown: String = field.chars().take(64).collect();
            Err(invalid(format!(
                "{place}: unknown field {shown:?} (expected: {})",
                known.join(", ")
            )))
        }
    }
}

/// 64 hex digits, either case, into 32 bytes.
pub(super) fn parse_sha256_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}
