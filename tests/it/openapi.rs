//! `openapi.yaml` stays a valid, self-consistent OpenAPI 3.1 document that
//! covers what README promises: every `$ref` resolves, every component is
//! used, every path parameter is declared, every operation answers with
//! `X-Request-Id`, and every error code in README's table appears with its
//! status. Coverage against the live router, `ErrorCode` and the headers the
//! server sends is in `openapi_live.rs`.

use crate::support::openapi::{deref, operations, resolve, spec, ROOT};
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};

fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("$ref", Value::String(reference)) => out.push(reference.clone()),
                    _ => refs(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, out)),
        _ => {}
    }
}

/// (status, code) for every error example of every operation's responses.
fn example_codes(spec: &Value) -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    for (_, _, operation) in operations(spec) {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            let response = deref(spec, response);
            let Some(content) = response["content"].as_object() else {
                continue;
            };
            for media in content.values() {
                let examples = media["examples"]
                    .as_object()
                    .into_iter()
                    .flat_map(|e| e.values());
                let samples = media
                    .get("example")
                    .into_iter()
                    .chain(examples.map(|e| &e["value"]));
                for sample in samples {
                    if let Some(code) = sample["error"]["code"].as_str() {
                        pairs.insert((status.clone(), code.to_string()));
                    }
                }
            }
        }
    }
    pairs
}

/// (status, code) rows of README's "Error codes" table; status `—` for codes
/// the server never sends.
fn readme_error_codes() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README.md");
    let section = readme
        .split("### Error codes")
        .nth(1)
        .expect("README has an Error codes section");
    let rows: Vec<(String, String)> = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let code = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((cells[1].to_string(), code.to_string()))
        })
        .collect();
    assert!(rows.len() >= 10, "README's error table was read: {rows:?}");
    rows
}

#[test]
fn it_is_an_openapi_3_1_document() {
    let spec = spec();
    assert!(
        spec["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "{}",
        spec["openapi"]
    );
    assert!(spec["info"]["title"].is_string() && spec["info"]["version"].is_string());
    assert!(spec["paths"].as_object().is_some_and(|p| !p.is_empty()));
    let mut ids = HashSet::new();
    for (path, method, operation) in operations(&spec) {
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: operationId"));
        assert!(ids.insert(id.to_string()), "operationId {id} twice");
        let responses = operation["responses"].as_object().expect("responses");
        assert!(!responses.is_empty(), "{method} {path}: no responses");
        for (status, response) in responses {
            assert!(
                status.len() == 3 && status.parse::<u16>().is_ok(),
                "{method} {path}: status {status}"
            );
            let response = deref(&spec, response);
            assert!(
                response["description"].is_string(),
                "{method} {path} {status}: description"
            );
        }
    }
}

#[test]
fn every_ref_resolves_and_every_component_is_used() {
    let spec = spec();
    let mut all = Vec::new();
    refs(&spec, &mut all);
    assert!(!all.is_empty());
    for reference in &all {
        assert!(
            reference.starts_with("#/components/"),
            "{reference} is local to components"
        );
        assert!(
            resolve(&spec, reference).is_some(),
            "{reference} does not resolve"
        );
    }
    let used: HashSet<&str> = all.iter().map(String::as_str).collect();
    for kind in ["schemas", "responses", "parameters", "headers"] {
        for name in spec["components"][kind].as_object().expect(kind).keys() {
            let reference = format!("#/components/{kind}/{name}");
            assert!(
                used.contains(reference.as_str()),
                "{reference} is never used"
            );
        }
    }
}

#[test]
fn every_path_parameter_is_declared_and_required() {
    let spec = spec();
    for (path, method, operation) in operations(&spec) {
        let in_template: BTreeSet<String> = path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .map(String::from)
            .collect();
        let mut declared = BTreeSet::new();
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let parameter = deref(&spec, parameter);
            assert!(
                parameter["name"].is_string() && parameter["schema"].is_object(),
                "{parameter}"
            );
            if parameter["in"] == "path" {
                assert_eq!(
                    parameter["required"], true,
                    "{method} {path}: path parameters are required"
                );
                declared.insert(parameter["name"].as_str().unwrap_or_default().to_string());
            }
        }
        assert_eq!(in_template, declared, "{method} {path}");
    }
}

#[test]
fn it_describes_every_route_of_the_api() {
    let spec = spec();
    let described: BTreeSet<String> = operations(&spec)
        .into_iter()
        .map(|(path, method, _)| format!("{} {path}", method.to_uppercase()))
        .collect();
    let expected: BTreeSet<String> = [
        "POST /v1/tool-calls",
        "GET /v1/tool-calls/{call_id}",
        "GET /v1/tool-calls/by-key/{key}",
        "GET /v1/tool-calls/{call_id}/audit",
        "GET /v1/tools",
        "GET /stats",
        "GET /healthz",
        "GET /metrics",
        "GET /openapi.yaml",
        "POST /mcp",
        "GET /v1/tool-calls",
        "GET /v1/nodes",
        "GET /v1/overview",
        "POST /v1/tool-calls/{call_id}/cancel",
        "POST /v1/tool-calls/{call_id}/approve",
        "POST /v1/tool-calls/{call_id}/deny",
        "GET /v1/tool-calls/{call_id}/approval",
        "GET /v1/approvals",
        "POST /v1/tool-calls/{call_id}/rerun",
        "POST /v1/bulk-actions",
        "GET /v1/bulk-actions/{job_id}",
        "POST /v1/tools/{name}/pause",
        "POST /v1/tools/{name}/resume",
        "GET /v1/verify",
        "GET /ui",
        "GET /ui/{asset}",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(described, expected);
}

#[test]
fn every_readme_error_code_appears_with_its_status() {
    let spec = spec();
    let enumerated: HashSet<&str> = spec["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let examples = example_codes(&spec);
    for (status, code) in readme_error_codes() {
        assert!(
            enumerated.contains(code.as_str()),
            "{code} is not in ErrorCode"
        );
        if status.parse::<u16>().is_ok() {
            assert!(
                examples.contains(&(status.clone(), code.clone())),
                "no {status} response shows {code}"
            );
        }
    }
    // And no code is only a name: each one the server sends has an answer.
    let shown: HashSet<&str> = examples.iter().map(|(_, code)| code.as_str()).collect();
    for code in &enumerated {
        assert!(
            shown.contains(code) || *code == "retry_exhausted",
            "{code} appears in no response"
        );
    }
}

#[test]
fn the_headers_are_where_the_api_sets_them() {
    let spec = spec();
    let headers = |response: &Value| -> BTreeSet<String> {
        deref(&spec, response)["headers"]
            .as_object()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default()
    };
    for (path, method, operation) in operations(&spec) {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            let names = headers(response);
            let place = format!("{method} {path} {status}");
            assert!(names.contains("X-Request-Id"), "{place}: X-Request-Id");
            // `/mcp`'s 202 accepts a notification: there is nothing to poll.
            if (status == "202" && path != "/mcp") || (status == "503" && path != "/healthz") {
                assert!(names.contains("Retry-After"), "{place}: Retry-After");
            }
            if status == "401" {
                assert!(
                    names.contains("WWW-Authenticate"),
                    "{place}: WWW-Authenticate"
                );
            }
            if status == "405" {
                assert!(names.contains("Allow"), "{place}: Allow");
            }
            // Create-or-get's answers, a bulk action's (its job, which may be
            // the key's), and a re-run's call (never a replay); a cancel's
            // call is neither.
            let created = method == "post"
                && (path == "/v1/tool-calls" || path == "/v1/bulk-actions")
                && (status == "200" || status == "202");
            let rerun = path.ends_with("/rerun") && status == "202";
            let new_job = path == "/v1/bulk-actions" && status == "202";
            for (header, expected) in [
                ("Location", created || rerun),
                ("Idempotent-Replayed", created && !new_job),
            ] {
                // A `409 duplicate_intent` names the live call in `Location`.
                let optional = status == "409" && header == "Location";
                if !optional {
                    assert_eq!(names.contains(header), expected, "{place}: {header}");
                }
            }
        }
    }
    let bearer = &spec["components"]["securitySchemes"]["bearerAuth"];
    assert_eq!(
        (&bearer["type"], &bearer["scheme"]),
        (&"http".into(), &"bearer".into())
    );
    let health = &spec["paths"]["/healthz"]["get"];
    assert_eq!(
        health["security"],
        Value::Array(vec![]),
        "/healthz needs no token"
    );
}

#[test]
fn the_call_and_conflict_bodies_carry_the_new_fields() {
    let spec = spec();
    let schemas = &spec["components"]["schemas"];
    let required = |schema: &Value| -> Vec<String> {
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    let call = required(&schemas["Call"]);
    for field in [
        "call_id",
        "status",
        "attempt",
        "effect_id",
        "query_url",
        "expires_at",
        "next_attempt_at",
        "cancel_requested_at",
    ] {
        assert!(call.contains(&field.to_string()), "Call requires {field}");
        assert!(
            schemas["Call"]["properties"][field].is_object(),
            "Call.{field} has a schema"
        );
    }
    let conflict = &schemas["ConflictError"]["allOf"][1]["properties"]["error"];
    assert_eq!(required(conflict), ["call_id"]);
    let audit_event = required(&schemas["AuditEvent"]);
    assert_eq!(audit_event, ["at", "event", "attempt", "detail"]);
}
