//! The pieces the PostgreSQL wing's statements share: a call read by id or
//! key (`select_call`, `select_tenant_call`, `select_call_by_key`) and from
//! its row (`call_from_row`), and a new call's id drawn again on the rare
//! clash (`with_fresh_call_id`). A leaf of the wing's statements: `sql`,
//! `approval`, `cancel`, `rerun`, `list` and the others use it; it uses
//! none of them.

use super::super::ids::{new_call_id, new_effect_id, stored_effect_id};
use super::super::model::{Call, CallProgress};
use super::error::violates;
use super::session::GenericClient;
use crate::status::Status;
use serde_json::Value;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::Row;

pub(super) fn select_call(
    client: &mut impl GenericClient,
    call_id: &str,
) -> Result<Option<Call>, tokio_postgres::Error> {
    const BY_ID: &str =
        "SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                status, result_json, error_json, attempt, lease_until, owner, effect_id,
                created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json
           FROM calls WHERE call_id = $1";
    one_call(client, BY_ID, &[&call_id])
}

/// A call by id only if it is `tenant`'s: another tenant's reads as absent.
pub(super) fn select_tenant_call(
    client: &mut impl GenericClient,
    tenant: &str,
    call_id: &str,
) -> Result<Option<Call>, tokio_postgres::Error> {
    const BY_TENANT_ID: &str =
        "SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                status, result_json, error_json, attempt, lease_until, owner, effect_id,
                created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json
           FROM calls WHERE call_id = $1 AND tenant = $2";
    one_call(client, BY_TENANT_ID, &[&call_id, &tenant])
}

pub(super) fn select_call_by_key(
    client: &mut impl GenericClient,
    tenant: &str,
    idem_key: &str,
) -> Result<Option<Call>, tokio_postgres::Error> {
    const BY_KEY: &str =
        "SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                status, result_json, error_json, attempt, lease_until, owner, effect_id,
                created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json
           FROM calls WHERE tenant = $1 AND idem_key = $2";
    one_call(client, BY_KEY, &[&tenant, &idem_key])
}

/// The call `sql` (a `SELECT` of the columns `call_from_row` reads, on a
/// unique column) finds, if any.
fn one_call(
    client: &mut impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Call>, tokio_postgres::Error> {
    client
        .query_opt(sql, params)?
        .map(|r| call_from_row(&r))
        .transpose()
}

/// Run `insert` with a newly drawn call id and its effect id; when another
/// node drew the same id in the same millisecond (`calls_pkey`), draw again,
/// up to eight times. The one place a new call's identity is drawn.
pub(super) fn with_fresh_call_id(
    mut insert: impl FnMut(&str, &str) -> Result<Row, tokio_postgres::Error>,
) -> Result<Row, tokio_postgres::Error> {
    let mut attempts_left = 8;
    loop {
        let call_id = new_call_id();
        let effect_id = new_effect_id(&call_id);
        match insert(&call_id, &effect_id) {
            Err(e) if violates(&e, "calls_pkey") && attempts_left > 0 => attempts_left -= 1,
            other => return other,
        }
    }
}

/// One `calls` row, its columns in the order every statement here returns
/// them: `call_id` first, `cancel_requested_at` and `progress_json` last. A status this release
/// does not know is an error (`StatusColumn`), never a guess.
pub(super) fn call_from_row(row: &Row) -> Result<Call, tokio_postgres::Error> {
    let json_col = |i: usize| -> Option<Value> {
        row.get::<_, Option<String>>(i)
            .and_then(|s| serde_json::from_str(&s).ok())
    };
    let call_id: String = row.get(0);
    Ok(Call {
        effect_id: stored_effect_id(row.get(14), &call_id),
        call_id,
        tenant: row.get(1),
        idem_key: row.get(2),
        fingerprint: row.get(3),
        client_id: row.get(4),
        seq: row.get(5),
        tool: row.get(6),
        args_json: row.get(7),
        status: row.try_get::<_, StatusColumn>(8)?.0,
        result: json_col(9),
        error: json_col(10),
        attempt: row.get(11),
        lease_until: row.get(12),
        owner: row.get(13),
        created_at: row.get(15),
        updated_at: row.get(16),
        next_attempt_at: row.get(17),
        cancel_requested_at: row.get(18),
        progress: row
            .get::<_, Option<String>>(19)
            .and_then(|text| CallProgress::from_json(&text)),
        expires_at: None,
    })
}

/// `calls.status` as read: `Status::parse`, so an unknown word fails the
/// read with `UnknownStatus` as its cause.
struct StatusColumn(Status);

impl<'a> FromSql<'a> for StatusColumn {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let word = <&str as FromSql>::from_sql(ty, raw)?;
        Ok(StatusColumn(Status::parse(word)?))
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}
