//! Tenants and tokens, against the service in this process (the refusals at
//! start-up against the real binary): `--auth-file` makes every request but
//! `/healthz` carry a bearer token (`401` with `WWW-Authenticate` otherwise, a
//! token wrong in its last byte included); idempotency keys are scoped per
//! tenant; a tenant never sees or affects another's calls (`404`, never `403`);
//! `/metrics` and the global `/stats` need an admin; and a reachable `--host`
//! without tokens is refused.

use crate::support::Counts;
use crate::support::Http;
use crate::support::{charge, AuthFile, Local, TempDb, SERVER_BIN};
use serde_json::{json, Value};
use std::process::Command;

const ACME: &str = "acme-token-3f9a";
const BETA: &str = "beta-token-77c1";
const OPS: &str = "ops-token-b2d0";

fn tenants() -> AuthFile {
    AuthFile::new(&[
        ("acme", ACME, false),
        ("beta", BETA, false),
        ("ops", OPS, true),
    ])
}

/// A request as `token`'s tenant: status and JSON body.
fn as_tenant(
    server: &Local,
    token: &str,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let authorization = format!("Bearer {token}");
    let mut headers = vec![("Authorization", authorization.as_str())];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    let text = body.map(Value::to_string);
    let response = server.call(method, path, &headers, text.as_deref());
    (response.status, response.json())
}

fn post_as(server: &Local, token: &str, key: &str, body: &Value) -> (u16, Value) {
    as_tenant(
        server,
        token,
        "POST",
        "/v1/tool-calls",
        Some(key),
        Some(body),
    )
}

/// No token, a wrong one (one byte off at the end, or shorter), and a header
/// that is not `Bearer` are each `401 unauthorized` with a challenge, and
/// nothing is created; `/healthz` needs no token.
#[test]
fn requests_without_a_valid_token_are_refused_with_a_challenge() {
    let db = TempDb::new("auth-401");
    let auth = tenants();
    let server = Local::start(&db, &["--auth-file", auth.path_str()]);
    let last_byte_off = format!("{}b", &ACME[..ACME.len() - 1]);
    assert_ne!(last_byte_off, ACME);
    let cases: [(Option<String>, &str); 5] = [
        (None, "Bearer realm=\"idempotent-tool\""),
        (
            Some(format!("Bearer {last_byte_off}")),
            "error=\"invalid_token\"",
        ),
        (
            Some(format!("Bearer {}", &ACME[..ACME.len() - 1])),
            "error=\"invalid_token\"",
        ),
        (Some(format!("Basic {ACME}")), "error=\"invalid_token\""),
        (Some(ACME.to_string()), "error=\"invalid_token\""),
    ];
    for (authorization, challenge) in cases {
        for (method, path) in [
            ("POST", "/v1/tool-calls"),
            ("GET", "/v1/tool-calls/c_0000000000000000"),
            ("GET", "/stats"),
            ("GET", "/metrics"),
            ("GET", "/openapi.yaml"),
            ("GET", "/no/such/path"),
        ] {
            let mut headers = vec![("Idempotency-Key", "k-401")];
            if let Some(value) = &authorization {
                headers.push(("Authorization", value.as_str()));
            }
            let body = charge(1).to_string();
            let response = server.call(method, path, &headers, Some(&body));
            let place = format!("{method} {path} with {authorization:?}");
            assert_eq!(response.status, 401, "{place}");
            assert_eq!(response.json()["error"]["code"], "unauthorized", "{place}");
            let www = response.header("WWW-Authenticate").unwrap_or_default();
            assert!(
                www.starts_with("Bearer ") && www.contains(challenge),
                "{place}: {www}"
            );
            let text = String::from_utf8_lossy(&response.body);
            assert!(
                !text.contains(ACME) && !text.contains(&last_byte_off),
                "{text}"
            );
        }
    }
    assert_eq!(db.calls(), 0);
    let (status, health) = server.get("/healthz");
    assert_eq!((status, health), (200, json!({"ok": true})));
    let (status, _) = post_as(&server, ACME, "k-401", &charge(1));
    assert_eq!(status, 202, "the right token works");
}

/// The same key in two tenants is two calls, each with its own effect; each
/// tenant reads back its own call by key, and both tenants' retries stay
/// with their own call.
#[test]
fn the_same_key_in_two_tenants_is_two_calls() {
    let db = TempDb::new("auth-scope");
    let auth = tenants();
    let server = Local::start(&db, &["--auth-file", auth.path_str()]);
    let (status, a) = post_as(&server, ACME, "step-1", &charge(10));
    assert_eq!(status, 202, "{a}");
    let (status, b) = post_as(&server, BETA, "step-1", &charge(99));
    assert_eq!(
        status, 202,
        "a different tenant's key is new, not a conflict: {b}"
    );
    assert_ne!(a["call_id"], b["call_id"]);
    for (token, call) in [(ACME, &a), (BETA, &b)] {
        let id = call["call_id"].as_str().unwrap();
        let (_, done) = as_tenant(
            &server,
            token,
            "GET",
            &format!("/v1/tool-calls/{id}?wait=10"),
            None,
            None,
        );
        assert_eq!(done["status"], "succeeded", "{done}");
        let (status, by_key) = as_tenant(
            &server,
            token,
            "GET",
            "/v1/tool-calls/by-key/step-1",
            None,
            None,
        );
        assert_eq!((status, &by_key["call_id"]), (200, &call["call_id"]));
    }
    let (_, again) = post_as(&server, BETA, "step-1", &charge(99));
    assert_eq!(again["call_id"], b["call_id"]);
    assert_eq!(db.calls(), 2);
    assert_eq!(db.effects(), 2);
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE tenant = 'acme' AND idem_key = 'step-1'"),
        1
    );
}

/// A tenant cannot read another's call by id, by key, or its audit: each is
/// `404 not_found` exactly as for a call that does not exist, both ways.
#[test]
fn a_tenant_never_sees_another_tenants_calls() {
    let db = TempDb::new("auth-isolation");
    let auth = tenants();
    let server = Local::start(&db, &["--auth-file", auth.path_str()]);
    let (_, a) = post_as(&server, ACME, "only-acme", &charge(1));
    let (_, b) = post_as(&server, BETA, "only-beta", &charge(2));
    let pairs = [(BETA, &a, "only-acme"), (ACME, &b, "only-beta")];
    for (stranger, call, key) in pairs {
        let id = call["call_id"].as_str().unwrap();
        for path in [
            format!("/v1/tool-calls/{id}"),
            format!("/v1/tool-calls/{id}/audit"),
            format!("/v1/tool-calls/by-key/{key}"),
            format!("/v1/tool-calls/{id}?wait=1"),
        ] {
            let (status, body) = as_tenant(&server, stranger, "GET", &path, None, None);
            assert_eq!(status, 404, "{path}: {body}");
            assert_eq!(body["error"]["code"], "not_found", "{path}");
        }
        let (status, missing) = as_tenant(
            &server,
            stranger,
            "GET",
            "/v1/tool-calls/c_0000000000000000",
            None,
            None,
        );
        assert_eq!(status, 404);
        assert_eq!(
            missing["error"]["message"]
                .as_str()
                .map(|m| m.contains("not found")),
            Some(true)
        );
    }
    // Its own tenant still reads it.
    let id = a["call_id"].as_str().unwrap();
    let (status, _) = as_tenant(
        &server,
        ACME,
        "GET",
        &format!("/v1/tool-calls/{id}"),
        None,
        None,
    );
    assert!(status == 200 || status == 202);
}

/// `/stats` counts the caller's calls; `?scope=all` and `/metrics` need an
/// admin (`403 forbidden` otherwise), who sees every tenant's.
#[test]
fn stats_are_per_tenant_and_global_views_need_an_admin() {
    let db = TempDb::new("auth-stats");
    let auth = tenants();
    let server = Local::start(&db, &["--auth-file", auth.path_str()]);
    for n in 0..3 {
        post_as(&server, ACME, &format!("a-{n}"), &charge(1));
    }
    let (_, last) = post_as(&server, BETA, "b-0", &charge(1));
    let id = last["call_id"].as_str().unwrap();
    as_tenant(
        &server,
        BETA,
        "GET",
        &format!("/v1/tool-calls/{id}?wait=10"),
        None,
        None,
    );
    let (status, acme) = as_tenant(&server, ACME, "GET", "/stats", None, None);
    assert_eq!((status, &acme["calls"]), (200, &json!(3)), "{acme}");
    let (_, beta) = as_tenant(&server, BETA, "GET", "/stats?scope=tenant", None, None);
    assert_eq!(beta["calls"], 1, "{beta}");
    assert_eq!(beta["effects"], 1, "{beta}");
    let (_, ops) = as_tenant(&server, OPS, "GET", "/stats", None, None);
    assert_eq!(ops["calls"], 0, "an admin's own calls: none: {ops}");
    let (status, all) = as_tenant(&server, OPS, "GET", "/stats?scope=all", None, None);
    assert_eq!((status, &all["calls"]), (200, &json!(4)), "{all}");
    for path in ["/stats?scope=all", "/metrics"] {
        let (status, body) = as_tenant(&server, ACME, "GET", path, None, None);
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
    }
    let metrics = server.call(
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {OPS}"))],
        None,
    );
    assert_eq!(metrics.status, 200);
    let (status, body) = as_tenant(&server, ACME, "GET", "/stats?scope=everyone", None, None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_request"))
    );
}

/// A non-loopback `--host` without `--auth-file` exits 2 before binding;
/// `--insecure-no-auth` or an auth file lets it start. A bad auth file
/// exits 2 naming the problem.
#[test]
fn a_reachable_host_without_tokens_is_refused() {
    let db = TempDb::new("auth-host");
    let out = Command::new(SERVER_BIN)
        .args(["--host", "0.0.0.0", "--port", "0", "--db", db.path_str()])
        .output()
        .expect("run the server");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
    assert!(!db.path.exists(), "nothing was created");
    let server = Local::start(&db, &["--host", "0.0.0.0", "--insecure-no-auth"]);
    assert_eq!(server.get("/healthz").0, 200);
    drop(server);
    let auth = tenants();
    let server = Local::start(&db, &["--host", "0.0.0.0", "--auth-file", auth.path_str()]);
    assert_eq!(server.get("/stats").0, 401);
    drop(server);
    let bad = AuthFile::new(&[("acme", ACME, false)]);
    std::fs::write(
        &bad.path,
        r#"{"tenants": {"acme": {"token_sha256": "my-raw-token"}}}"#,
    )
    .unwrap();
    let out = Command::new(SERVER_BIN)
        .args([
            "--port",
            "0",
            "--db",
            db.path_str(),
            "--auth-file",
            bad.path_str(),
        ])
        .output()
        .expect("run the server");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("64 hex") && !stderr.contains("my-raw-token"),
        "{stderr}"
    );
}
