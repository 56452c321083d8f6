//! The auth file's loader and the token check, held to their rules.

use super::entry::parse_sha256_hex;
use super::*;

fn sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn two_tenants() -> Auth {
    let file = format!(
        r#"{{"tenants": {{"acme": {{"token_sha256": "{}"}},
                         "ops": {{"token_sha256": "{}", "admin": true}}}}}}"#,
        sha256_hex("acme-token"),
        sha256_hex("ops-token").to_uppercase()
    );
    Auth::from_json(&file).unwrap()
}

fn load_error(text: &str) -> String {
    let message = Auth::from_json(text).unwrap_err().to_string();
    assert!(!message.contains('\n'), "one line: {message}");
    message
}

#[test]
fn each_token_authenticates_its_own_tenant() {
    let auth = two_tenants();
    assert!(auth.is_required());
    let acme = auth.authenticate(Some("Bearer acme-token")).unwrap();
    assert_eq!((&*acme.name, acme.admin), ("acme", false));
    let ops = auth.authenticate(Some("bearer   ops-token")).unwrap();
    assert_eq!((&*ops.name, ops.admin), ("ops", true));
}

#[test]
fn wrong_missing_and_malformed_tokens_are_refused() {
    let auth = two_tenants();
    let cases = [
        (None, AuthError::Missing),
        (Some("Bearer acme-tokeN"), AuthError::UnknownToken),
        (Some("Bearer acme-toke"), AuthError::UnknownToken),
        (Some("Bearer acme-token "), AuthError::NotBearer),
        (Some("Basic YWNtZTp4"), AuthError::NotBearer),
        (Some("Bearer"), AuthError::NotBearer),
        (Some("Bearer "), AuthError::NotBearer),
        (Some("acme-token"), AuthError::NotBearer),
        (Some(""), AuthError::NotBearer),
    ];
    for (header, expected) in cases {
        assert_eq!(auth.authenticate(header), Err(expected), "{header:?}");
    }
}

#[test]
fn errors_and_debug_never_show_tokens_or_hashes() {
    let auth = two_tenants();
    let debug = format!("{auth:?}");
    assert!(debug.contains("acme") && !debug.contains(&sha256_hex("acme-token")));
    for header in [None, Some("Bearer s3cret"), Some("Token s3cret")] {
        let err = auth.authenticate(header).unwrap_err();
        let shown = format!("{err} {err:?} {}", err.challenge());
        assert!(!shown.contains("s3cret"), "{shown}");
    }
    let hash = sha256_hex("x");
    let message = load_error(&format!(
        r#"{{"tenants": {{"a": {{"token_sha256": "{hash}"}}, "b": {{"token_sha256": "{hash}"}}}}}}"#
    ));
    assert!(message.contains("same token_sha256") && !message.contains(&hash));
    let message = load_error(r#"{"tenants": {"a": {"token_sha256": "my-raw-token"}}}"#);
    assert!(message.contains("64 hex") && !message.contains("my-raw-token"));
}

#[test]
fn without_an_auth_file_everyone_is_the_anonymous_admin() {
    let auth = Auth::anonymous();
    assert!(!auth.is_required());
    for header in [None, Some("Bearer anything"), Some("garbage")] {
        assert_eq!(auth.authenticate(header), Ok(Tenant::anonymous()));
    }
    assert!(Tenant::anonymous().admin);
    assert_eq!(auth.tenant_names().len(), 0);
}

#[test]
fn auth_file_mistakes_are_one_line_errors_naming_the_place() {
    let good = sha256_hex("t");
    let cases = [
        ("[]", "top level must be an object"),
        ("{}", "\"tenants\" is required"),
        (r#"{"tenants": []}"#, "must be an object"),
        (r#"{"tenants": {}}"#, "is empty"),
        (r#"{"tenants": {}, "extra": 1}"#, "unknown field \"extra\""),
        (r#"{"tenants": {"a": 1}}"#, "tenant \"a\" must be an object"),
        (
            r#"{"tenants": {"a": {}}}"#,
            "tenant \"a\": token_sha256 is required",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": 5}}}"#,
            "must be a string",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "abc"}}}"#,
            "64 hex digits",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}", "admin": "yes"}}}"#,
            "admin must be true or false",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}", "role": "x"}}}"#,
            "tenant \"a\": role must be one of viewer, caller, operator, approver, admin",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}", "rol": "viewer"}}}"#,
            "tenant \"a\": unknown field \"rol\"",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}", "admin": true, "role": "viewer"}}}"#,
            "admin and role viewer disagree",
        ),
        (
            r#"{"tenants": {"a": {"role": "viewer", "tokens": {"b": {"token_sha256": "{good}"}}}}}"#,
            "admin and role are the tenant token's",
        ),
        (
            r#"{"tenants": {"a": {"tokens": {}}}}"#,
            "token_sha256 is required (or tokens naming at least one)",
        ),
        (
            r#"{"tenants": {"a": {"tokens": {"b c": {"token_sha256": "{good}"}}}}}"#,
            "token \"b c\": a token name must be",
        ),
        (
            r#"{"tenants": {"a": {"tokens": {"b": {"token_sha256": "{good}", "role": "boss"}}}}}"#,
            "tenant \"a\", token \"b\": role must be one of",
        ),
        (
            r#"{"tenants": {"a": {"tokens": {"b": {"role": "viewer"}}}}}"#,
            "tenant \"a\", token \"b\": token_sha256 is required",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}", "mcp_client_may_approve": 1}}}"#,
            "mcp_client_may_approve must be true or false",
        ),
        (
            r#"{"tenants": {"": {"token_sha256": "{good}"}}}"#,
            "tenant name \"\" must be 1 to 64",
        ),
        (
            r#"{"tenants": {"a b": {"token_sha256": "{good}"}}}"#,
            "tenant name \"a b\"",
        ),
        (
            r#"{"tenants": {"anonymous": {"token_sha256": "{good}"}}}"#,
            "reserved",
        ),
        (
            r#"{"tenants": {"a": {"token_sha256": "{good}"}, "a": {"token_sha256": "{good}"}}}"#,
            "appears more than once",
        ),
        ("{\"tenants\": ", "not valid JSON"),
    ];
    for (text, expected) in cases {
        let text = text.replace("{good}", &good);
        let message = load_error(&text);
        assert!(message.contains(expected), "{text}: {message}");
    }
    let long = "x".repeat(MAX_TENANT_NAME + 1);
    let message = load_error(&format!(
        r#"{{"tenants": {{"{long}": {{"token_sha256": "{good}"}}}}}}"#
    ));
    assert!(message.contains("1 to 64"), "{message}");
    let ok = format!(
        r#"{{"tenants": {{"{}": {{"token_sha256": "{good}"}}}}}}"#,
        "A-z_0.9".repeat(9).chars().take(64).collect::<String>()
    );
    assert!(Auth::from_json(&ok).is_ok());
}

#[test]
fn a_missing_file_names_its_path() {
    let err = Auth::load(Path::new("/nonexistent/auth.json")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/auth.json"), "{err}");
}

#[test]
fn hex_parses_both_cases_and_nothing_else() {
    let lower = sha256_hex("t");
    let parsed = parse_sha256_hex(&lower).unwrap();
    assert_eq!(parse_sha256_hex(&lower.to_uppercase()), Some(parsed));
    assert_eq!(parsed.to_vec(), Sha256::digest(b"t").to_vec());
    assert_eq!(parse_sha256_hex(&lower[..62]), None);
    assert_eq!(parse_sha256_hex(&format!("{}g", &lower[..63])), None);
    assert_eq!(parse_sha256_hex(&format!("+{}", &lower[..63])), None);
    // 64 bytes that are not 64 characters: multi-byte UTF-8.
    assert_eq!(parse_sha256_hex(&"é".repeat(32)), None);
}

#[test]
fn the_match_is_found_wherever_the_tenant_sits() {
    let tenants: Vec<String> = (0..50)
        .map(|i| {
            format!(
                r#""t{i}": {{"token_sha256": "{}"}}"#,
                sha256_hex(&format!("tok{i}"))
            )
        })
        .collect();
    let auth = Auth::from_json(&format!(r#"{{"tenants": {{{}}}}}"#, tenants.join(","))).unwrap();
    for i in [0, 1, 25, 49] {
        let tenant = auth.authenticate(Some(&format!("Bearer tok{i}"))).unwrap();
        assert_eq!(&*tenant.name, format!("t{i}"));
    }
    assert_eq!(
        auth.authenticate(Some("Bearer tok50")),
        Err(AuthError::UnknownToken)
    );
}

/// Named tokens carry their own role and name; the tenant's own token is a
/// caller unless it says otherwise; no two tokens share a hash, even across
/// tenants.
#[test]
fn tokens_carry_their_role_and_principal() {
    let file = format!(
        r#"{{"tenants": {{
             "acme": {{"token_sha256": "{}", "mcp_client_may_approve": true,
                       "tokens": {{"alice": {{"token_sha256": "{}", "role": "approver"}},
                                  "bob": {{"token_sha256": "{}", "role": "viewer"}},
                                  "carol": {{"token_sha256": "{}"}}}}}},
             "ops": {{"role": "admin", "token_sha256": "{}"}}}}}}"#,
        sha256_hex("acme-token"),
        sha256_hex("alice-token"),
        sha256_hex("bob-token"),
        sha256_hex("carol-token"),
        sha256_hex("ops-token"),
    );
    let auth = Auth::from_json(&file).unwrap();
    let who = |token: &str| {
        let t = auth.authenticate(Some(&format!("Bearer {token}"))).unwrap();
        (t.name.to_string(), t.principal.to_string(), t.role, t.admin)
    };
    assert_eq!(
        who("acme-token"),
        ("acme".into(), "acme".into(), Role::Caller, false)
    );
    assert_eq!(
        who("alice-token"),
        ("acme".into(), "alice".into(), Role::Approver, false)
    );
    assert_eq!(
        who("bob-token"),
        ("acme".into(), "bob".into(), Role::Viewer, false)
    );
    assert_eq!(
        who("carol-token"),
        ("acme".into(), "carol".into(), Role::Caller, false)
    );
    assert_eq!(
        who("ops-token"),
        ("ops".into(), "ops".into(), Role::Admin, true)
    );
    let alice = auth.authenticate(Some("Bearer alice-token")).unwrap();
    assert!(alice.client_may_approve && !alice.notify);
    assert!(alice.may(Action::Decide) && !alice.may(Action::Call));
    assert_eq!(auth.tenant_names(), ["acme", "ops"]);
    let debug = format!("{auth:?}");
    assert!(debug.contains("alice") && !debug.contains(&sha256_hex("alice-token")));

    let twin = format!(
        r#"{{"tenants": {{"a": {{"token_sha256": "{h}"}},
                         "b": {{"tokens": {{"x": {{"token_sha256": "{h}"}}}}}}}}}}"#,
        h = sha256_hex("same")
    );
    let message = load_error(&twin);
    assert!(
        message.contains("tenant \"b\", token \"x\"") && message.contains("same token_sha256"),
        "{message}"
    );
}
