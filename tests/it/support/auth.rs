//! `--auth-file`s for the tests: tenants with tokens, written as the
//! service expects them (only each token's SHA-256), in a temp folder that
//! is removed on drop.

use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::path::PathBuf;

/// An `--auth-file` in a temp folder of its own: each tenant's name, token
/// and admin flag; the file holds only the tokens' SHA-256, as in production.
pub struct AuthFile {
    pub path: PathBuf,
    _dir: TempDir,
}

impl AuthFile {
    pub fn new(tenants: &[(&str, &str, bool)]) -> AuthFile {
        let entries: serde_json::Map<String, Value> = tenants
            .iter()
            .map(|(name, token, admin)| {
                let entry = serde_json::json!({"token_sha256": sha256_hex(token), "admin": admin});
                (name.to_string(), entry)
            })
            .collect();
        AuthFile::with_tenants(serde_json::Value::Object(entries), &[])
    }

    /// A file whose `tenants` is `tenants` as given (roles, named tokens,
    /// webhooks), with `files` (name, text) written beside it: a webhook's
    /// `secret_file`, say.
    pub fn with_tenants(tenants: Value, files: &[(&str, &str)]) -> AuthFile {
        let dir = TempDir::new("idem-auth").expect("make a temp folder");
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write a file beside the auth file");
        }
        let path = dir.join("auth.json");
        let text = serde_json::json!({ "tenants": tenants }).to_string();
        std::fs::write(&path, text).expect("write the auth file");
        AuthFile { path, _dir: dir }
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8 here")
    }
}

/// The SHA-256 of a token, in hex: what an auth file holds.
pub fn sha256_hex(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
