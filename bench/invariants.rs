//! The checks after a run: the idempotency invariants, checked by
//! `store::verify` on the database file when the bench knows it (else from
//! `/stats`), and what each mode promises about the calls it added.
//!
//! It opens the database read-only and never writes: it may run beside a live
//! server, and a check must not change what it checks.

use crate::load::LoadResult;
use crate::measure::Stats;
use crate::target::{Target, REMOTE_TOOL};
use crate::Mode;
use idempotent_tool::store::verify::{verify_database, Check as VerifyCheck};
use idempotent_tool::store::Database;
use idempotent_tool::tools::EFFECT_TOOLS;
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
        Some(db) => checks.extend(store_checks(db, mode)),
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

/// Every invariant `idempotent-tool verify` checks, by `store::verify` itself
/// (one definition of each, tenants included), read-only. The tools that
/// write effects: the built-ins', and in `--mode http-tool` the bench's
/// remote tool, whose every success records the downstream's answer.
fn store_checks(db: &Path, mode: Mode) -> Vec<Check> {
    let mut effect_tools: Vec<&str> = EFFECT_TOOLS.to_vec();
    if mode == Mode::HttpTool {
        effect_tools.push(REMOTE_TOOL);
    }
    match verify_database(&Database::Sqlite(db.to_path_buf()), &effect_tools) {
        Ok(report) => report.checks.iter().map(named_check).collect(),
        Err(e) => vec![check(format!("verify {}: {e}", db.display()), false)],
    }
}

/// A verify check as the bench reports it: the invariant in words, and when
/// it is broken, how often and under which violation name.
fn named_check(c: &VerifyCheck) -> Check {
    match c.violations {
        0 => check(c.invariant.clone(), true),
        n => check(format!("{}: {n} × {}", c.invariant, c.name), false),
    }
}
