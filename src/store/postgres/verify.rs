//! `idempotent-tool verify --db postgres://...`: the invariants of
//! `store::verify`, checked on a PostgreSQL database in one read-only
//! REPEATABLE READ transaction (one snapshot, safe beside running nodes: it
//! takes no lock a writer waits for). The same queries as on SQLite, in
//! PostgreSQL's words (`to_postgres`). There is no `integrity_check`: page
//! checksums and `amcheck` are the server operator's tools, not ours.
//!
//! This module only reads; it never repairs.

use super::super::database::PgTarget;
use super::super::verify::{
    approval_checks, business_key_check, invariant_checks, Check, Report, Spec, VerifyError,
    MAX_EXAMPLES,
};
use super::error::store_error;
use super::session::{GenericClient, Session, Transaction};
use std::path::PathBuf;
use std::time::Instant;

pub(in crate::store) fn verify(
    target: &PgTarget,
    effect_tools: &[&str],
) -> Result<Report, VerifyError> {
    let mut session = super::connect::connect_once(target, None)
        .map_err(|e| VerifyError::Postgres(target.to_string(), e))?;
    verify_on(&mut session, target, effect_tools, None)
}

/// `verify` on a connection already open, each statement bounded by what is
/// left until `deadline` (`statement_timeout`), if there is one: past it the
/// answer is `TimedOut`, never a check that reads as violated because it was
/// cut short.
pub(in crate::store) fn verify_on(
    session: &mut Session,
    target: &PgTarget,
    effect_tools: &[&str],
    deadline: Option<Instant>,
) -> Result<Report, VerifyError> {
    session.set_deadline(deadline);
    let report = snapshot(session, target, effect_tools, Bound(deadline));
    match deadline {
        Some(deadline) if Instant::now() >= deadline => Err(VerifyError::TimedOut),
        _ => report,
    }
}

/// When the statements of one run must end, if ever.
#[derive(Clone, Copy)]
struct Bound(Option<Instant>);

impl Bound {
    /// Give the next statement only the time that is left (at least 1 ms,
    /// rounded up, so a statement stopped by it ends past the deadline).
    fn apply(self, tx: &mut Transaction<'_>) {
        if let Some(deadline) = self.0 {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = left.as_micros().div_ceil(1000).max(1);
            let _ = tx.batch_execute(&format!("SET LOCAL statement_timeout = {ms}"));
        }
    }
}

fn snapshot(
    session: &mut Session,
    target: &PgTarget,
    effect_tools: &[&str],
    bound: Bound,
) -> Result<Report, VerifyError> {
    let failed =
        |e: tokio_postgres::Error| VerifyError::Postgres(target.to_string(), store_error(e));
    let mut tx = session.snapshot().map_err(failed)?;
    bound.apply(&mut tx);
    let tables: i64 = tx
        .query_one(
            "SELECT count(*) FROM information_schema.tables
              WHERE table_schema = current_schema() AND table_name IN ('calls', 'effects')",
            &[],
        )
        .map_err(failed)?
        .get(0);
    if tables != 2 {
        return Err(VerifyError::NotAServiceDatabase(PathBuf::from(
            target.to_string(),
        )));
    }
    let mut specs = invariant_checks(true, true, effect_tools);
    let has_business_keys: i64 = tx
        .query_one(
            "SELECT count(*) FROM information_schema.tables
              WHERE table_schema = current_schema() AND table_name = 'business_keys'",
            &[],
        )
        .map_err(failed)?
        .get(0);
    if has_business_keys == 1 {
        specs.push(business_key_check());
    }
    let has_approvals: i64 = tx
        .query_one(
            "SELECT count(*) FROM information_schema.tables
              WHERE table_schema = current_schema() AND table_name = 'approvals'",
            &[],
        )
        .map_err(failed)?
        .get(0);
    if has_approvals == 1 {
        specs.extend(approval_checks());
    }
    let checks = specs
        .iter()
        .map(|spec| {
            bound.apply(&mut tx);
            run(&mut tx, spec)
        })
        .collect();
    let report = Report {
        path: PathBuf::from(target.to_string()),
        calls: count(&mut tx, bound, "SELECT count(*) FROM calls"),
        by_status: grouped(
            &mut tx,
            bound,
            "SELECT status, count(*) FROM calls GROUP BY status ORDER BY status",
        ),
        effects: count(&mut tx, bound, "SELECT count(*) FROM effects"),
        audit: grouped(
            &mut tx,
            bound,
            "SELECT event, count(*) FROM audit GROUP BY event ORDER BY event",
        ),
        tenants: Some(count(
            &mut tx,
            bound,
            "SELECT count(DISTINCT tenant) FROM calls",
        )),
        checks,
    };
    tx.commit().map_err(failed)?;
    Ok(report)
}

/// SQLite's spellings in the checks, in PostgreSQL's: `quote` of a value that
/// may be NULL, `group_concat`, and `IS NOT` between values.
fn to_postgres(sql: &str) -> String {
    sql.replace("quote(", "quote_nullable(")
        .replace("group_concat(", "string_agg(")
        .replace(" IS NOT c.", " IS DISTINCT FROM c.")
        .replace(" IS NOT 'succeeded'", " IS DISTINCT FROM 'succeeded'")
}

/// A check whose query fails is itself a violation (it could not be shown
/// to hold); a savepoint keeps the snapshot usable for the next one.
fn run(tx: &mut Transaction<'_>, spec: &Spec) -> Check {
    let sql = to_postgres(&spec.sql);
    let found = match tx.savepoint("verify_check") {
        Ok(mut savepoint) => {
            let rows = savepoint.query(sql.as_str(), &[]).map(|rows| {
                rows.iter()
                    .map(|r| {
                        r.get::<_, Option<String>>(0)
                            .unwrap_or_else(|| "a row with NULL in a NOT NULL column".into())
                    })
                    .collect::<Vec<_>>()
            });
            let _ = savepoint.rollback();
            rows.unwrap_or_else(|e| vec![format!("could not run the check: {e}")])
        }
        Err(e) => vec![format!("could not run the check: {e}")],
    };
    Check {
        name: spec.name,
        invariant: spec.invariant.clone(),
        violations: found.len(),
        examples: found.into_iter().take(MAX_EXAMPLES).collect(),
    }
}

/// A count for the report; `-1` when it cannot be computed.
fn count(tx: &mut Transaction<'_>, bound: Bound, sql: &str) -> i64 {
    bound.apply(tx);
    tx.query_one(sql, &[]).map(|r| r.get(0)).unwrap_or(-1)
}

fn grouped(tx: &mut Transaction<'_>, bound: Bound, sql: &str) -> Vec<(String, i64)> {
    bound.apply(tx);
    tx.query(sql, &[])
        .map(|rows| {
            rows.iter()
                .map(|r| (r.get::<_, Option<String>>(0).unwrap_or_default(), r.get(1)))
                .collect()
        })
        .unwrap_or_default()
}

/// `verify::tools_outside_database` on the database `target` names.
pub(in crate::store) fn tools_outside(
    target: &PgTarget,
    known: &[&str],
) -> Result<Vec<String>, VerifyError> {
    let failed =
        |e: tokio_postgres::Error| VerifyError::Postgres(target.to_string(), store_error(e));
    let mut session = super::connect::connect_once(target, None)
        .map_err(|e| VerifyError::Postgres(target.to_string(), e))?;
    let rows = session
        .query("SELECT DISTINCT tool FROM calls ORDER BY tool", &[])
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|row| row.get::<_, String>(0))
        .filter(|tool| !known.contains(&tool.as_str()))
        .collect())
}
