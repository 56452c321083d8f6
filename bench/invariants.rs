//! The checks after a run: the idempotency invariants, read in SQL from the
//! database file when the bench knows it (else from `/stats`), and what each
//! mode promises about the calls it added.
//!
//! It opens the database read-only and never writes: it may run beside a live
//! server, and a check must not change what it checks.

use crate::load::LoadResult;
use crate::measure::Stats;
use crate::target::Target;
use crate::Mode;
use rusqlite::OpenFlags;
use std::path::Path;

/// One named check and whether it held.
pub struct Check {
    pub name: String,
    pub ok: bool,
}

fn check(name: impl Into<String>, ok: bool) -> Check {
    Check {
        name: name.into(),
        ok,
    }
}

/// The invariants after a run: in SQL on the database file when we know it,
/// else from `/stats`; plus what the mode promises about the calls it added.
pub fn check_invariants(
    target: &Target,
    mode: Mode,
    load: &LoadResult,
    before: &Stats,
    after: &Stats,
    drained: bool,
) -> Vec<Check> {
    let mut checks = vec![check("drained before the deadline", drained)];
    match &target.db {
        Some(db) => checks.extend(sql_checks(db).unwrap_or_else(|e| vec![check(e, false)])),
        None => checks.push(check(
            "effects <= calls (/stats)",
            after.effects <= after.calls,
        )),
    }
    let (calls, effects) = (after.calls - before.calls, after.effects - before.effects);
    let accepted = load.accepted() as i64;
    match mode {
        Mode::SameKey if accepted > 0 => {
            checks.push(check(
                format!("same-key: calls=1 effects=1 (got {calls}, {effects})"),
                calls == 1 && effects == 1,
            ));
        }
        Mode::Distinct | Mode::HttpTool => {
            // Every success of `charge` and of an http tool writes one effect.
            let name = mode.name();
            let upper = accepted + load.status0 as i64;
            checks.push(check(
                format!(
                    "{name}: calls = accepted ({calls} vs {accepted}, +{} status0)",
                    load.status0
                ),
                accepted <= calls && calls <= upper,
            ));
            if drained {
                checks.push(check(
                    format!("{name}: one effect per call ({effects} vs {calls})"),
                    effects == calls,
                ));
            }
        }
        Mode::Mixed => {
            // Slots 0..=6 of every ten tickets carry a new key; every ticket is sent.
            let sent = load.requests() as i64;
            let new_keys = sent / 10 * 7 + (sent % 10).min(7);
            let all_answered = load.accepted() == load.requests();
            let ok = calls <= new_keys && (calls == new_keys || !all_answered);
            checks.push(check(
                format!("mixed: calls = new keys ({calls} vs {new_keys})"),
                ok,
            ));
        }
        _ => {}
    }
    checks
}

fn sql_checks(db: &Path) -> Result<Vec<Check>, String> {
    let conn = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| format!("open {} read-only: {e}", db.display()))?;
    let empty = |sql: &str| -> Result<bool, String> {
        let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
        let mut rows = stmt.query([]).map_err(|e| e.to_string())?;
        Ok(rows.next().map_err(|e| e.to_string())?.is_none())
    };
    let count = |table: &str| -> Result<i64, String> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .map_err(|e| e.to_string())
    };
    Ok(vec![
        check(
            "one call per key",
            empty("SELECT idem_key FROM calls GROUP BY idem_key HAVING count(*) > 1")?,
        ),
        check(
            "at most one effect per call",
            empty("SELECT call_id FROM effects GROUP BY call_id HAVING count(*) > 1")?,
        ),
        check("effects <= calls", count("effects")? <= count("calls")?),
    ])
}
