//! The overview's history on PostgreSQL (schema step 9; `store::readings`
//! has what a reading is and which are kept): the table, the write of one
//! reading — skipped when another node wrote one within half a step —
//! with the thinning of old ones, and the read of the reading at or before
//! each point of a chart, in one statement.
//!
//! Never reads `calls`.

use super::super::readings::{kept, Reading, READINGS_KEPT_SECS, READING_EVERY, THINNING};
use super::session::GenericClient;

/// Schema step 9.
pub(super) const READINGS_TABLE: &str = "
CREATE TABLE rate_readings (
  at      double precision PRIMARY KEY,
  totals  text NOT NULL
)";

const RECORD: &str = "INSERT INTO rate_readings (at, totals)
     SELECT $1::float8, $2::text
      WHERE NOT EXISTS (SELECT 1 FROM rate_readings
                         WHERE at > $1::float8 - $3::float8 AND at < $1::float8 + $3::float8)
     ON CONFLICT (at) DO NOTHING";

const DROP_OLD: &str = "DELETE FROM rate_readings WHERE at < $1";

const CROSSED: &str = "SELECT at FROM rate_readings WHERE at >= $1 AND at < $2";

const DROP_ONE: &str = "DELETE FROM rate_readings WHERE at = $1";

/// For each point (`$1`), the last reading at or before it.
const AT_POINTS: &str = "
SELECT p.i, r.at, r.totals
  FROM unnest($1::float8[]) WITH ORDINALITY AS p(point, i)
  LEFT JOIN LATERAL (
    SELECT at, totals FROM rate_readings WHERE at <= p.point ORDER BY at DESC LIMIT 1
  ) AS r ON true
 ORDER BY p.i";

/// Keep `reading` unless another node kept one within half a step of it;
/// then thin what has aged past a boundary (see `sqlite/readings.rs`).
pub(super) fn record(
    client: &mut impl GenericClient,
    reading: &Reading,
) -> Result<bool, tokio_postgres::Error> {
    let half = READING_EVERY.as_secs_f64() / 2.0;
    let written = client.execute(RECORD, &[&reading.at, &reading.totals_json(), &half])?;
    client.execute(DROP_OLD, &[&(reading.at - READINGS_KEPT_SECS)])?;
    for (older, _) in THINNING {
        let boundary = reading.at - older;
        let crossed: Vec<f64> = client
            .query(CROSSED, &[&(boundary - 1_200.0), &boundary])?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for at in crossed.into_iter().filter(|at| !kept(*at, reading.at)) {
            client.execute(DROP_ONE, &[&at])?;
        }
    }
    Ok(written == 1)
}

/// For each point, the last reading at or before it.
pub(super) fn at_points(
    client: &mut impl GenericClient,
    points: &[f64],
) -> Result<Vec<Option<Reading>>, tokio_postgres::Error> {
    Ok(client
        .query(AT_POINTS, &[&points])?
        .iter()
        .map(|r| {
            let at: Option<f64> = r.get(1);
            let totals: Option<String> = r.get(2);
            at.zip(totals)
                .map(|(at, totals)| Reading::from_stored(at, &totals))
        })
        .collect())
}
