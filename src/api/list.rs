//! `GET /v1/tool-calls`: the list and search of calls, newest first, a page
//! at a time — its parameters validated (each refusal a `400` naming the
//! parameter), the caller's scope, and the cursor.
//!
//! The scope is the caller's tenant; an admin may name another (`tenant=`)
//! or every tenant (`tenant=*`), and without `--auth-file` the one
//! anonymous admin sees every call, as `/stats` counts them. A cursor
//! (`next`) is the last call id shown and a binding: the first 16 hex of
//! the SHA-256 of the scope and the filters. No secret is in it — it only
//! ever names a position, and every page is read within the caller's own
//! scope — but one replayed with another scope or other filters is refused
//! `400`, so a page never silently continues a different search.
//!
//! This file reads calls only through `Calls::list`, and never answers a
//! tenant with another tenant's call, or with how many it has.

use super::error::ApiError;
use super::query::QueryParams;
use super::service::Api;
use crate::auth::Tenant;
use crate::calls::MAX_KEY_LEN;
use crate::fingerprint::{canonical, hex_sha256};
use crate::http::{Request, Response};
use crate::input::{parse_strict, quote};
use crate::status::Status;
use crate::store::{call_id_of_effect, Call, ListQuery};
use serde_json::{json, Value};

/// The parameters `GET /v1/tool-calls` takes; only `status` repeats.
const PARAMS: &[&str] = &[
    "status",
    "tool",
    "key",
    "key_prefix",
    "business_key",
    "effect_id",
    "error_code",
    "created_after",
    "created_before",
    "limit",
    "next",
    "tenant",
    "total",
];

const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// The longest business key a filter may name, in bytes.
const MAX_BUSINESS_KEY_LEN: usize = 4096;

/// The binding's length in a cursor, in hex digits.
const BINDING_HEX: usize = 16;

impl Api {
    /// `GET /v1/tool-calls`.
    pub(super) fn list_calls(&self, req: &Request, tenant: &Tenant) -> Result<Response, ApiError> {
        let params = QueryParams::parse(req.query.as_deref(), PARAMS, &["status"])?;
        let mut query = list_query(&params, self.scope(&params, tenant)?)?;
        let total = match params.one("total") {
            None | Some("false") => None,
            Some("true") => Some(self.calls.total(&query)?),
            Some(other) => return Err(bad("total", other, "true or false")),
        };
        let binding = binding(&query);
        if let Some(cursor) = params.one("next") {
            query.before_call_id = Some(position(cursor, &binding)?);
        }
        let page = self.calls.list(&query)?;
        let calls: Vec<Value> = page
            .calls
            .iter()
            .map(|c| self.with_wait(summary(c, tenant.admin), c))
            .collect();
        let next = page.next.map(|id| format!("{id}.{binding}"));
        let mut answer = json!({"calls": calls, "next": next});
        if let Some(total) = total {
            answer["total"] = json!({"calls": total.calls, "exact": total.exact});
        }
        Ok(Response::json(200, &answer))
    }

    /// `json` (a call's) with why it waits, when it is pending: its tool
    /// paused, a retry's backoff, a slot of its tool, a token of its rate,
    /// or a worker (`Calls::waiting_for`).
    pub(super) fn with_wait(&self, mut json: Value, call: &Call) -> Value {
        if let Some(wait) = self.calls.waiting_for(call) {
            json["waiting_for"] = json!(wait.as_str());
        }
        json
    }

    /// Whose calls a read route answers with: `tenant=` (admins only; `*`
    /// for every tenant), else the caller's own — or every call when there
    /// is no `--auth-file` (one anonymous admin, as `/stats` counts).
    /// `None` is every tenant.
    pub(super) fn scope(
        &self,
        params: &QueryParams,
        tenant: &Tenant,
    ) -> Result<Option<String>, ApiError> {
        match params.one("tenant") {
            Some(_) if !tenant.admin => Err(ApiError::Forbidden("?tenant=")),
            Some("*") => Ok(None),
            Some(name) if crate::auth::is_tenant_name(name) => Ok(Some(name.to_string())),
            Some(name) => Err(ApiError::BadRequest(format!(
                "tenant must be * or a tenant name (1 to 64 of A-Z a-z 0-9 _ . -), not {}",
                quote(name)
            ))),
            None if !self.auth.is_required() => Ok(None),
            None => Ok(Some(tenant.name.to_string())),
        }
    }
}

/// The list's filters, by the names the list takes (a bulk job's filter
/// takes the same).
pub(super) const FILTERS: &[&str] = &[
    "status",
    "tool",
    "key",
    "key_prefix",
    "business_key",
    "effect_id",
    "error_code",
    "created_after",
    "created_before",
    "tenant",
];

/// The store's query for these parameters, in `scope`, without a cursor.
pub(super) fn list_query(
    params: &QueryParams,
    scope: Option<String>,
) -> Result<ListQuery, ApiError> {
    let mut statuses = Vec::new();
    for status in params.all("status") {
        if Status::parse(status).is_err() {
            let every = Status::words().collect::<Vec<_>>().join(", ");
            return Err(bad("status", status, &format!("one of {every}")));
        }
        statuses.push(status.to_string());
    }
    statuses.sort_unstable();
    statuses.dedup();
    let limit = match params.one("limit") {
        None => DEFAULT_LIMIT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| bad("limit", raw, "an integer from 1 to 500"))?,
    };
    Ok(ListQuery {
        tenant: scope,
        statuses,
        tool: bounded(params, "tool", MAX_KEY_LEN)?,
        key: bounded(params, "key", MAX_KEY_LEN)?,
        key_prefix: bounded(params, "key_prefix", MAX_KEY_LEN)?,
        business_key: params.one("business_key").map(business_key).transpose()?,
        error_code: params.one("error_code").map(error_code).transpose()?,
        effect_id: match params.one("effect_id") {
            Some(id) if call_id_of_effect(id).is_none() => {
                return Err(bad(
                    "effect_id",
                    id,
                    "eff_ and 16 hex digits (and _ and 32 more)",
                ))
            }
            id => id.map(String::from),
        },
        created_after: params
            .one("created_after")
            .map(time_of("created_after"))
            .transpose()?,
        created_before: params
            .one("created_before")
            .map(time_of("created_before"))
            .transpose()?,
        before_call_id: None,
        limit,
    })
}

/// An error code as calls carry it: 1 to 64 of `a-z 0-9 _` (the tool error
/// codes, `cancelled`).
fn error_code(value: &str) -> Result<String, ApiError> {
    let word = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    match word {
        true => Ok(value.to_string()),
        false => Err(bad(
            "error_code",
            value,
            "an error code (1 to 64 of a-z 0-9 _)",
        )),
    }
}

/// `name`'s value, refused past `max` bytes.
fn bounded(params: &QueryParams, name: &str, max: usize) -> Result<Option<String>, ApiError> {
    match params.one(name) {
        Some(value) if value.len() > max => Err(ApiError::BadRequest(format!(
            "{name} is {} bytes; at most {max}",
            value.len()
        ))),
        value => Ok(value.map(String::from)),
    }
}

/// The business key as `business_keys` stores it: canonical JSON of the
/// array of the rule's field values. A value starting with `[` is that
/// array as JSON; anything else is the one field's string value
/// (`order-42` is `["order-42"]`; a number needs the array form, `[42]`).
fn business_key(value: &str) -> Result<String, ApiError> {
    if value.len() > MAX_BUSINESS_KEY_LEN {
        return Err(bad("business_key", value, "at most 4096 bytes"));
    }
    if !value.starts_with('[') {
        return Ok(canonical(&json!([value])));
    }
    match parse_strict(value.as_bytes()) {
        Ok(array @ Value::Array(_)) => Ok(canonical(&array)),
        _ => Err(bad(
            "business_key",
            value,
            "a JSON array, or one field's text",
        )),
    }
}

/// An RFC 3339 time (`2026-12-06T01:00:00Z`, or with an offset) as Unix
/// seconds.
fn time_of(name: &'static str) -> impl Fn(&str) -> Result<f64, ApiError> {
    move |value| {
        crate::rfc3339::parse_unix_secs(value)
            .ok_or_else(|| bad(name, value, "an RFC 3339 time such as 2026-12-06T01:00:00Z"))
    }
}

/// The first 16 hex of the SHA-256 of the query's scope and filters (not
/// its page size): what a cursor is bound to.
fn binding(q: &ListQuery) -> String {
    let mut filters = json!([
        "v1",
        q.tenant.as_deref().unwrap_or("*"),
        q.statuses,
        q.tool,
        q.key,
        q.key_prefix,
        q.business_key,
        q.effect_id,
        q.created_after,
        q.created_before,
    ]);
    // Only when given, so the cursors of every other query stay as they were.
    if let (Some(code), Some(all)) = (&q.error_code, filters.as_array_mut()) {
        all.push(json!({"error_code": code}));
    }
    hex_sha256(filters.to_string().as_bytes())[..BINDING_HEX].to_string()
}

/// The call id a cursor continues below, if it is this query's cursor.
fn position(cursor: &str, binding: &str) -> Result<String, ApiError> {
    let refused = || {
        ApiError::BadRequest(format!(
            "next {} is not a cursor of this list: pass the next of the previous page, \
             with the same tenant and filters",
            quote(cursor)
        ))
    };
    let (call_id, bound_to) = cursor.split_once('.').ok_or_else(refused)?;
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let well_formed = call_id.len() == 18 && call_id.starts_with("c_") && hex(&call_id[2..]);
    if !well_formed || bound_to != binding {
        return Err(refused());
    }
    Ok(call_id.to_string())
}

/// A call as a page shows it: the call object without `args` and `result`,
/// and, for an admin, whose it is.
fn summary(call: &Call, with_tenant: bool) -> Value {
    let mut json = call.to_json();
    if let Some(object) = json.as_object_mut() {
        object.remove("args");
        object.remove("result");
        if with_tenant {
            object.insert("tenant".into(), json!(call.tenant));
        }
    }
    json
}

fn bad(name: &str, value: &str, expected: &str) -> ApiError {
    ApiError::BadRequest(format!("{name} must be {expected}, not {}", quote(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cursor continues only the query it came from.
    #[test]
    fn a_cursor_is_bound_to_its_scope_and_filters() {
        let mut q = ListQuery {
            tenant: Some("acme".into()),
            limit: 50,
            ..ListQuery::default()
        };
        let b = binding(&q);
        let cursor = format!("c_0190f3a2b4c5d6e7.{b}");
        assert_eq!(position(&cursor, &b).unwrap(), "c_0190f3a2b4c5d6e7");
        q.limit = 7;
        assert_eq!(binding(&q), b, "the page size is not a filter");
        for other in [
            ListQuery {
                tenant: Some("beta".into()),
                ..q.clone()
            },
            ListQuery {
                tenant: None,
                ..q.clone()
            },
            ListQuery {
                statuses: vec!["failed".into()],
                ..q.clone()
            },
            ListQuery {
                key_prefix: Some("a".into()),
                ..q.clone()
            },
            ListQuery {
                created_after: Some(1.0),
                ..q.clone()
            },
        ] {
            assert!(position(&cursor, &binding(&other)).is_err(), "{other:?}");
        }
        for bad in [
            "",
            "c_0190f3a2b4c5d6e7",
            "x.y",
            "c_0190F3A2B4C5D6E7.",
            "c_1.abc",
        ] {
            assert!(position(bad, &b).is_err(), "{bad:?}");
        }
    }

    /// One reading of each business key form.
    #[test]
    fn a_business_key_is_an_array_or_one_field() {
        assert_eq!(business_key("order-42").unwrap(), r#"["order-42"]"#);
        assert_eq!(business_key("42").unwrap(), r#"["42"]"#);
        assert_eq!(business_key(r#"[ "u1", 7 ]"#).unwrap(), r#"["u1",7]"#);
        assert!(business_key("[1,").is_err());
        assert!(
            business_key(r#"[1, {"a":1,"a":2}]"#).is_err(),
            "read one way only"
        );
    }

    /// Times with an offset or `Z`, to the nanosecond; nothing else.
    #[test]
    fn times_are_rfc_3339() {
        let parse = time_of("created_after");
        assert_eq!(parse("1970-01-01T00:00:01Z").unwrap(), 1.0);
        assert_eq!(parse("1970-01-01T01:00:01.5+01:00").unwrap(), 1.5);
        for bad in ["1970-01-01", "yesterday", "1970-01-01T00:00:01", "1e9"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
