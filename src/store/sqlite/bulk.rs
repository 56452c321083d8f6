//! Loading many calls at once, for measurement: the bench's million-call
//! points need a database that looks as if it had served a million charges
//! (`insert_succeeded_charges`), or a day of mixed calls (`insert_mixed`),
//! in seconds rather than hours; and `strip_console_writes`, for the bench's
//! comparison of the write path with and without what the console added to it.
//!
//! This bypasses the writer and its guarantees on purpose — no fsync per
//! transaction (`synchronous=OFF`; the caller syncs the file once), no audit
//! rows — so it must never be used to record real calls, and only on a file
//! no service is writing to at the same moment.

use super::super::error::StoreError;
use super::super::ids::{new_effect_id, now};
use super::super::mixed::MixedCalls;
use rusqlite::{params, Connection};
use serde_json::json;
use std::path::Path;

/// What every bulk-loaded call is: one `charge` of the same args.
pub struct BulkCharge<'a> {
    pub fingerprint: &'a str,
    pub args_json: &'a str,
    pub amount: i64,
    /// Keys are `{key_prefix}-{n}`, so two loads never share a key.
    pub key_prefix: &'a str,
}

/// Rows per transaction: large, since nothing here is synced until the end.
const ROWS_PER_TRANSACTION: u64 = 100_000;

/// Insert `count` `succeeded` calls of `charge`, each with its effect, into
/// the database at `path` (whose schema must exist), then checkpoint the WAL.
pub fn insert_succeeded_charges(
    path: &Path,
    charge: &BulkCharge<'_>,
    count: u64,
) -> Result<(), StoreError> {
    let mut conn = Connection::open(path)?;
    conn.execute_batch("PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;")?;
    let ts = now();
    for first in (0..count).step_by(ROWS_PER_TRANSACTION as usize) {
        let tx = conn.transaction()?;
        {
            let mut call = tx.prepare(
                "INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status,
                                    result_json, attempt, effect_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 'charge', ?4, 'succeeded', ?5, 1, ?6, ?7, ?7)",
            )?;
            let mut effect = tx.prepare(
                "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
                 VALUES (?1, ?2, 'charge', ?3, ?4)",
            )?;
            for n in first..(first + ROWS_PER_TRANSACTION).min(count) {
                let key = format!("{}-{n}", charge.key_prefix);
                let call_id = format!(
                    "c_{}",
                    &crate::fingerprint::hex_sha256(key.as_bytes())[..16]
                );
                let effect_id = new_effect_id(&call_id);
                let result = json!({"charged": charge.amount, "effect_id": effect_id}).to_string();
                call.execute(params![
                    call_id,
                    key,
                    charge.fingerprint,
                    charge.args_json,
                    result,
                    effect_id,
                    ts
                ])?;
                effect.execute(params![effect_id, call_id, charge.amount, ts])?;
            }
        }
        tx.commit()?;
    }
    // No statement here notes its rows for the count tables: count them all.
    super::counts::recount(&conn)?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    Ok(())
}

/// Insert `mix`'s calls, their effects and business keys into the database
/// at `path` (whose schema must exist), in large unsynced transactions, and
/// a week of the overview's readings (`MixedCalls::readings`), then
/// checkpoint the WAL; the count tables are then counted from the rows.
pub fn insert_mixed(path: &Path, mix: &MixedCalls) -> Result<(), StoreError> {
    let mut conn = Connection::open(path)?;
    conn.execute_batch("PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;")?;
    for first in (0..mix.count).step_by(ROWS_PER_TRANSACTION as usize) {
        let tx = conn.transaction()?;
        {
            let mut call = tx.prepare(
                "INSERT INTO calls (call_id, tenant, idem_key, fingerprint, tool, args_json, status,
                                    result_json, error_json, attempt, lease_until, owner, effect_id,
                                    created_at, updated_at, next_attempt_at)
                 VALUES (?1, ?2, ?3, 'bulk', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14)",
            )?;
            let mut effect = tx.prepare(
                "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
                 VALUES (?1, ?2, ?3, 1, ?4)",
            )?;
            let mut business_key = tx.prepare(
                "INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0)",
            )?;
            for n in first..(first + ROWS_PER_TRANSACTION).min(mix.count) {
                let r = mix.row(n);
                call.execute(params![
                    r.call_id,
                    r.tenant,
                    r.idem_key,
                    r.tool,
                    r.args_json,
                    r.status,
                    r.result_json,
                    r.error_json,
                    r.attempt,
                    r.lease_until,
                    r.owner,
                    r.effect_id,
                    r.created_at,
                    r.next_attempt_at
                ])?;
                if r.effect {
                    effect.execute(params![r.effect_id, r.call_id, r.tool, r.created_at])?;
                }
                if let Some(bkey) = &r.business_key {
                    business_key.execute(params![
                        r.call_id,
                        r.tenant,
                        r.tool,
                        bkey,
                        r.created_at
                    ])?;
                }
            }
        }
        tx.commit()?;
    }
    let tx = conn.transaction()?;
    {
        let mut reading = tx.prepare("INSERT INTO rate_readings (at, totals) VALUES (?1, ?2)")?;
        for r in mix.readings() {
            reading.execute(params![r.at, r.totals_json()])?;
        }
    }
    tx.commit()?;
    // No statement here notes its rows for the count tables: count them all.
    super::counts::recount(&conn)?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    Ok(())
}

/// For the bench's write-path comparison only: change in the file at `path`
/// what a service on it writes for every call — put `idx_calls_status` back
/// on `(status, lease_until, attempt)` as before migration 11
/// (`old_status_index`), and put migration 11's count triggers back
/// (`count_triggers`; the writer keeps the counts too, so they are counted
/// twice) — to measure what each cost. Its counts and lists are wrong from
/// then on: never on a database that serves anyone.
pub fn strip_console_writes(
    path: &Path,
    old_status_index: bool,
    count_triggers: bool,
) -> Result<(), StoreError> {
    let conn = Connection::open(path)?;
    if old_status_index {
        conn.execute_batch(
            "DROP INDEX idx_calls_status;
             CREATE INDEX idx_calls_status ON calls(status, lease_until, attempt);",
        )?;
    }
    if count_triggers {
        conn.execute_batch(super::counts::COUNT_TABLES)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_call;
    use crate::store::{CallStore, Created, Scope, Status, StoreOptions};
    use crate::temp::TempDb;

    /// The bulk loader writes settled calls the store reads like any other.
    #[test]
    fn bulk_loaded_charges_read_like_served_ones() -> Result<(), StoreError> {
        let db = TempDb::new("bulk_loaded_charges_read_like_served_ones");
        let store = CallStore::open(db.path(), StoreOptions::default())?;
        let charge = BulkCharge {
            fingerprint: "fp",
            args_json: r#"{"amount":1}"#,
            amount: 1,
            key_prefix: "bulk",
        };
        insert_succeeded_charges(db.path(), &charge, 1_000)?;
        let stats = store.stats(Scope::All)?;
        assert_eq!((stats.calls, stats.effects), (1_000, 1_000));
        let call = store
            .find_by_key(crate::auth::ANONYMOUS, "bulk-999")?
            .expect("loaded");
        assert_eq!(call.status, Status::Succeeded);
        assert!(matches!(
            store.create_or_get(new_call("bulk-999", "fp"))?,
            Created::Existing(_)
        ));
        Ok(())
    }
}
