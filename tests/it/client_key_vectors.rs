//! The clients' key vectors (`clients/key-vectors.json`) against the service's
//! own canonical JSON (`src/fingerprint.rs`): the Python and TypeScript
//! clients check the same file, so the adapters' keys and the service's
//! fingerprints rest on one canonical form, byte for byte.

use idempotent_tool::fingerprint::{canonical, hex_sha256};
use serde_json::{json, Value};

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/key-vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the vectors")).expect("JSON")
}

/// Each JSON text, parsed by serde_json, prints as the file says.
#[test]
fn canonical_vectors_match_the_fingerprint_json() {
    let all = vectors();
    let cases = all["canonical"].as_array().expect("canonical vectors");
    assert!(cases.len() >= 10, "the vectors were read");
    for case in cases {
        let parsed: Value =
            serde_json::from_str(case["json"].as_str().expect("json")).expect("parse");
        assert_eq!(canonical(&parsed), case["canonical"], "{}", case["name"]);
    }
}

/// Each key is `tk1-` and the SHA-256 of the canonical `{args, occurrence, scope, tool}`.
#[test]
fn key_vectors_follow_the_rule_on_the_fingerprint_json() {
    let all = vectors();
    for case in all["keys"].as_array().expect("key vectors") {
        let args: Value =
            serde_json::from_str(case["args_json"].as_str().expect("args")).expect("parse");
        let payload = json!({
            "args": args,
            "occurrence": case["occurrence"],
            "scope": case["scope"],
            "tool": case["tool"],
        });
        let key = format!("tk1-{}", hex_sha256(canonical(&payload).as_bytes()));
        assert_eq!(key, case["key"], "{}", case["name"]);
    }
}
