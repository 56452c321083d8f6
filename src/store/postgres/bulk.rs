//! Loading the bench's mixed million (`store::mixed`) into PostgreSQL, with
//! `COPY`: the list's latency at a million calls on this backend too.
//!
//! For measurement only: one connection outside the pool, no audit rows,
//! and only into a database no service writes to at that moment. The count
//! tables' row triggers are off while it loads (a hundred thousand updates
//! of the same counter row in one transaction leave a chain of versions
//! each update walks: hours instead of a minute), and the counts are then
//! made once from the rows (`BACKFILL_*_COUNTS`, as the migration makes them),
//! all in one transaction: no one sees the calls without their counts.

use super::super::error::StoreError;
use super::super::mixed::{MixedCalls, MixedRow};
use super::counts::{BACKFILL_CALL_COUNTS, BACKFILL_EFFECT_COUNTS, BACKFILL_ERROR_COUNTS};
use super::error::store_error;
use super::target::PgTarget;
use std::fmt::Write as _;
use std::io::Write as _;

/// Rows per `COPY` (each batch is made in memory before it is sent).
const ROWS_PER_COPY: u64 = 100_000;

/// Insert `mix`'s calls, effects and business keys into the database
/// `target` names (whose schema must exist).
pub(in crate::store) fn insert_mixed(
    target: &PgTarget,
    mix: &MixedCalls,
) -> Result<(), StoreError> {
    // The `postgres` crate (tests and the bench only) for its `COPY`.
    let mut client = ::postgres::Config::from(target.config().clone())
        .connect(::postgres::NoTls)
        .map_err(store_error)?;
    let mut tx = client.transaction().map_err(store_error)?;
    tx.batch_execute(
        "ALTER TABLE calls DISABLE TRIGGER calls_counted;
         ALTER TABLE calls DISABLE TRIGGER calls_failures_counted;
         ALTER TABLE effects DISABLE TRIGGER effects_counted;
         DELETE FROM call_counts;
         DELETE FROM effect_counts;
         DELETE FROM error_counts;",
    )
    .map_err(store_error)?;
    for first in (0..mix.count).step_by(ROWS_PER_COPY as usize) {
        let rows: Vec<MixedRow> = (first..(first + ROWS_PER_COPY).min(mix.count))
            .map(|n| mix.row(n))
            .collect();
        copy(
            &mut tx,
            "COPY calls (call_id, tenant, idem_key, fingerprint, tool, args_json, status,
                         result_json, error_json, attempt, lease_until, owner, effect_id,
                         created_at, updated_at, next_attempt_at) FROM STDIN",
            rows.iter().map(call_line),
        )?;
        copy(
            &mut tx,
            "COPY effects (effect_id, call_id, tool, amount, created_at) FROM STDIN",
            rows.iter().filter(|r| r.effect).map(|r| {
                format!(
                    "{}\t{}\t{}\t1\t{}\n",
                    r.effect_id, r.call_id, r.tool, r.created_at
                )
            }),
        )?;
        copy(
            &mut tx,
            "COPY business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
             FROM STDIN",
            rows.iter().filter_map(|r| {
                let bkey = r.business_key.as_ref()?;
                let at = r.created_at;
                Some(format!(
                    "{}\t{}\t{}\t{bkey}\t{at}\t{at}\tf\n",
                    r.call_id, r.tenant, r.tool
                ))
            }),
        )?;
    }
    copy(
        &mut tx,
        "COPY rate_readings (at, totals) FROM STDIN",
        mix.readings()
            .iter()
            .map(|r| format!("{}\t{}\n", r.at, r.totals_json())),
    )?;
    for backfill in [
        BACKFILL_CALL_COUNTS,
        BACKFILL_EFFECT_COUNTS,
        BACKFILL_ERROR_COUNTS,
    ] {
        tx.batch_execute(backfill).map_err(store_error)?;
    }
    tx.batch_execute(
        "ALTER TABLE calls ENABLE TRIGGER calls_counted;
         ALTER TABLE calls ENABLE TRIGGER calls_failures_counted;
         ALTER TABLE effects ENABLE TRIGGER effects_counted;",
    )
    .map_err(store_error)?;
    tx.commit().map_err(store_error)?;
    // As autovacuum would leave them soon after: the visibility map set (so
    // an index-only scan reads no table page) and the planner's statistics
    // made. Measured before that, the list pays for the load, not itself.
    client
        .batch_execute("VACUUM (ANALYZE) calls, effects, business_keys, call_counts")
        .map_err(store_error)?;
    Ok(())
}

/// `COPY ... FROM STDIN` of `lines` (text format: tab-separated, `\N` for
/// NULL; the mix holds no tab, newline or backslash).
fn copy(
    tx: &mut ::postgres::Transaction<'_>,
    statement: &str,
    lines: impl Iterator<Item = String>,
) -> Result<(), StoreError> {
    let mut writer = tx.copy_in(statement).map_err(store_error)?;
    for line in lines {
        writer
            .write_all(line.as_bytes())
            .map_err(|e| StoreError::internal(format!("COPY: {e}")))?;
    }
    writer.finish().map_err(store_error)?;
    Ok(())
}

/// One `calls` row in `COPY`'s text format.
fn call_line(r: &MixedRow) -> String {
    let text = |v: Option<&str>| v.map_or("\\N".to_string(), str::to_string);
    let real = |v: Option<f64>| v.map_or("\\N".to_string(), |x| x.to_string());
    let mut line = String::new();
    let _ = writeln!(
        line,
        "{}\t{}\t{}\tbulk\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        r.call_id,
        r.tenant,
        r.idem_key,
        r.tool,
        r.args_json,
        r.status,
        text(r.result_json),
        text(r.error_json),
        r.attempt,
        real(r.lease_until),
        text(r.owner),
        r.effect_id,
        r.created_at,
        r.created_at,
        real(r.next_attempt_at),
    );
    line
}
