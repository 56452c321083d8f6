//! Loading many settled calls at once, for measurement: the bench's
//! million-call point needs a database that looks as if it had served a
//! million charges, in seconds rather than hours.
//!
//! This bypasses the writer and its guarantees on purpose — no fsync per
//! transaction (`synchronous=OFF`; the caller syncs the file once), no audit
//! rows — so it must never be used to record real calls, and only on a file
//! no service is writing to at the same moment.

use super::super::error::StoreError;
use super::super::ids::{new_effect_id, now};
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
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
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
