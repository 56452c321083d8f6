//! The overview's history on SQLite (migration 16; `store::readings` has
//! what a reading is and which are kept): the table, the write of one
//! reading (and the thinning of old ones, in the same operation), and the
//! read of the reading at or before each point of a chart.
//!
//! Never reads `calls`.

use super::super::readings::{kept, Reading, READINGS_KEPT_SECS, READING_EVERY, THINNING};
use rusqlite::{params, Connection, OptionalExtension};

/// Migration 16: one row per reading, its totals as JSON
/// (`Reading::totals_json`).
pub(super) const READINGS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS rate_readings (
  at      REAL PRIMARY KEY,
  totals  TEXT NOT NULL
)";

/// Keep `reading` unless another process kept one within half a step of
/// it; then delete what `kept` no longer keeps (among the readings older
/// than an hour: a few rows a pass).
pub(super) fn record_op(
    reading: Reading,
) -> impl FnOnce(&Connection) -> rusqlite::Result<bool> + Send + 'static {
    move |conn| {
        let half = READING_EVERY.as_secs_f64() / 2.0;
        let written = conn
            .prepare_cached(
                "INSERT INTO rate_readings (at, totals)
                 SELECT ?1, ?2
                  WHERE NOT EXISTS (SELECT 1 FROM rate_readings
                                     WHERE at > ?1 - ?3 AND at < ?1 + ?3)
                 ON CONFLICT (at) DO NOTHING",
            )?
            .execute(params![reading.at, reading.totals_json(), half])?;
        thin(conn, reading.at)?;
        Ok(written == 1)
    }
}

/// Delete readings past `READINGS_KEPT_SECS`, and those that have just
/// aged past a thinning boundary (`THINNING`, the last twenty minutes'
/// worth at each) that `kept` no longer keeps.
fn thin(conn: &Connection, now: f64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM rate_readings WHERE at < ?1")?
        .execute([now - READINGS_KEPT_SECS])?;
    let mut crossed =
        conn.prepare_cached("SELECT at FROM rate_readings WHERE at >= ?1 AND at < ?2")?;
    let mut delete = conn.prepare_cached("DELETE FROM rate_readings WHERE at = ?1")?;
    for (older, _) in THINNING {
        let boundary = now - older;
        let just_crossed: Vec<f64> = crossed
            .query_map([boundary - 1_200.0, boundary], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for at in just_crossed.into_iter().filter(|at| !kept(*at, now)) {
            delete.execute([at])?;
        }
    }
    Ok(())
}

/// For each point, the last reading at or before it.
pub(super) fn at_points(
    conn: &Connection,
    points: &[f64],
) -> rusqlite::Result<Vec<Option<Reading>>> {
    let mut last = conn.prepare_cached(
        "SELECT at, totals FROM rate_readings WHERE at <= ?1 ORDER BY at DESC LIMIT 1",
    )?;
    points
        .iter()
        .map(|point| {
            last.query_row([point], |r| {
                Ok(Reading::from_stored(r.get(0)?, &r.get::<_, String>(1)?))
            })
            .optional()
        })
        .collect()
}
