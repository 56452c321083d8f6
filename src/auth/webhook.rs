//! A tenant's webhook, as the auth file names it: `"webhook": {"url":
//! "https://…", "secret_file": "acme.whsec"}` — where the service tells the
//! tenant of each call that starts waiting for approval, signed the
//! Standard Webhooks way with the secret the file holds (`whsec_` and the
//! base64 of 24 to 64 bytes, as Standard Webhooks' libraries make them).
//!
//! Both the URL and the secret are secrets: a chat tool's incoming-webhook
//! URL is its own credential. `WebhookTarget`'s `Debug` shows neither, and
//! no error message quotes them. This file only reads the configuration;
//! `crate::webhook` signs and delivers.

use base64::Engine;
use serde_json::{Map, Value};
use std::fmt;
use std::path::Path;

/// The prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";

/// Where a tenant's notifications go, and the key that signs them.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// `http://` or `https://`.
    pub url: String,
    /// The signing key: the secret's base64 part, decoded.
    pub key: Vec<u8>,
}

impl fmt::Debug for WebhookTarget {
    /// Neither the URL nor the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookTarget(***)")
    }
}

/// Read a tenant's `webhook` entry; `Err` is the message, naming the field
/// but never its value. `base_dir`: where a relative `secret_file` starts.
pub(super) fn parse(value: &Value, base_dir: &Path) -> Result<WebhookTarget, String> {
    let entry = value
        .as_object()
        .ok_or("webhook must be an object {\"url\": \"https://...\", \"secret_file\": \"...\"}")?;
    only(entry)?;
    let url = entry
        .get("url")
        .and_then(Value::as_str)
        .ok_or("webhook.url is required: an http:// or https:// URL")?;
    let scheme_ok = ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && url.len() > scheme.len()
    });
    if !scheme_ok || url.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("webhook.url must be an http:// or https:// URL without spaces".into());
    }
    let file = entry
        .get("secret_file")
        .and_then(Value::as_str)
        .filter(|f| !f.is_empty())
        .ok_or("webhook.secret_file is required: a file holding whsec_ and base64")?;
    let path = base_dir.join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("webhook.secret_file {}: {e}", path.display()))?;
    let key = decode_secret(text.trim_end_matches(['\n', '\r']))
        .map_err(|why| format!("webhook.secret_file {}: {why}", path.display()))?;
    Ok(WebhookTarget {
        url: url.to_string(),
        key,
    })
}

fn only(entry: &Map<String, Value>) -> Result<(), String> {
    match entry
        .keys()
        .find(|k| !matches!(k.as_str(), "url" | "secret_file"))
    {
        Some(field) => Err(format!(
            "webhook: unknown field {:?} (expected: url, secret_file)",
            field.chars().take(64).collect::<String>()
        )),
        None => Ok(()),
    }
}

/// `whsec_` + base64 of 24 to 64 bytes, as the signing key.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, &'static str> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or("the secret must start with whsec_")?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "the secret after whsec_ must be base64")?;
    if !(24..=64).contains(&key.len()) {
        return Err("the secret must encode 24 to 64 bytes");
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_is_whsec_and_base64_of_enough_bytes() {
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(key.len(), 24);
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not base64!",
            "whsec_c2hvcnQ=",
        ] {
            assert!(decode_secret(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mistakes_name_the_field_never_the_value() {
        let dir = crate::temp::TempDir::new("webhook-config").unwrap();
        std::fs::write(
            dir.path().join("ok.whsec"),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("bad.whsec"), "s3cret-value").unwrap();
        let ok = parse(
            &json!({"url": "https://chat.example/hook?token=t0k", "secret_file": "ok.whsec"}),
            dir.path(),
        )
        .unwrap();
        assert_eq!(ok.key.len(), 24);
        assert!(!format!("{ok:?}").contains("t0k"));
        let cases = [
            (json!("x"), "must be an object"),
            (
                json!({"secret_file": "ok.whsec"}),
                "webhook.url is required",
            ),
            (
                json!({"url": "ftp://x", "secret_file": "ok.whsec"}),
                "webhook.url must be",
            ),
            (
                json!({"url": "https://x"}),
                "webhook.secret_file is required",
            ),
            (
                json!({"url": "https://x", "secret_file": "bad.whsec"}),
                "must start with whsec_",
            ),
            (
                json!({"url": "https://x", "secret_file": "none.whsec"}),
                "none.whsec",
            ),
            (
                json!({"url": "https://x", "secret_file": "ok.whsec", "token": 1}),
                "unknown field \"token\"",
            ),
        ];
        for (value, expected) in cases {
            let message = parse(&value, dir.path()).unwrap_err();
            assert!(message.contains(expected), "{value}: {message}");
            assert!(!message.contains("s3cret-value"), "{message}");
        }
    }
}
