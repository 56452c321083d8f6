//! The downstream as a webhook receiver (`--webhook-secret-file`): a POST
//! carrying Standard Webhooks headers is checked the way a receiver must —
//! all three headers present, the timestamp within five minutes, one of
//! the `v1,` signatures the HMAC of `id.timestamp.body` under the secret,
//! compared in constant time — then recorded once per `webhook-id` (a
//! retry of a delivered message is acknowledged and dropped). A message
//! that fails the check is `401` and recorded as refused. `GET /webhooks`
//! lists what arrived, oldest first.
//!
//! Its own table in the downstream's file; never applies an effect.

use idempotent_tool::http::{Request, Response};
use idempotent_tool::webhook::{decode_secret, signature};
use rusqlite::{params, Connection};
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

pub const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS webhooks (
        msg_id TEXT PRIMARY KEY,
        deliveries INTEGER NOT NULL,
        verified INTEGER NOT NULL,
        body TEXT NOT NULL
    );";

/// How far a message's timestamp may be from this clock, in seconds.
const TOLERANCE_SECS: i64 = 300;

/// The signing key, from a `whsec_…` file.
pub fn read_key(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    decode_secret(text.trim_end()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether `req` is a webhook (it carries `webhook-id`).
pub fn is_webhook(req: &Request) -> bool {
    req.header("webhook-id").is_some()
}

/// Check and record one delivery; `seen` is how many times its id arrived.
pub fn receive(conn: &Connection, key: &[u8], req: &Request) -> rusqlite::Result<(Response, i64)> {
    let verified = verify(key, req);
    let msg_id = req.header("webhook-id").unwrap_or_default();
    let seen: i64 = conn.query_row(
        "INSERT INTO webhooks (msg_id, deliveries, verified, body) VALUES (?1, 1, ?2, ?3)
         ON CONFLICT (msg_id) DO UPDATE
            SET deliveries = deliveries + 1, verified = max(verified, excluded.verified)
         RETURNING deliveries",
        params![msg_id, verified, String::from_utf8_lossy(&req.body)],
        |row| row.get(0),
    )?;
    let response = match verified {
        true => Response::json(200, &json!({"received": msg_id, "deliveries": seen})),
        false => Response::json(
            401,
            &json!({"error": {"code": "bad_signature", "message": "the webhook signature does not verify"}}),
        ),
    };
    Ok((response, seen))
}

/// The receiver's check.
fn verify(key: &[u8], req: &Request) -> bool {
    let (Some(id), Some(timestamp), Some(signatures)) = (
        req.header("webhook-id"),
        req.header("webhook-timestamp"),
        req.header("webhook-signature"),
    ) else {
        return false;
    };
    let Ok(timestamp) = timestamp.parse::<i64>() else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if (now - timestamp).abs() > TOLERANCE_SECS {
        return false;
    }
    let expected = signature(key, id, timestamp, &req.body);
    signatures
        .split(' ')
        .any(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

/// `GET /webhooks`: every message that arrived, oldest first.
pub fn list(conn: &Connection) -> rusqlite::Result<Response> {
    let mut stmt =
        conn.prepare("SELECT msg_id, deliveries, verified, body FROM webhooks ORDER BY rowid")?;
    let rows: Vec<Value> = stmt
        .query_map([], |row| {
            let body: String = row.get(3)?;
            Ok(json!({
                "msg_id": row.get::<_, String>(0)?,
                "deliveries": row.get::<_, i64>(1)?,
                "verified": row.get::<_, bool>(2)?,
                "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
            }))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Response::json(200, &json!({"webhooks": rows})))
}
