//! Paused tools on PostgreSQL (schema step 10; `store::paused` has the
//! rules): the table, the pause and the resume (one statement each), and
//! the read of every paused tool. Every claim statement of this wing checks
//! the table itself (`sql`'s claims and created-claimed insert, `limits`'
//! claim), so a pause committed on one node holds on every node at once,
//! whatever each has yet heard of it.
//!
//! Never runs a tool; never touches `calls`.

use super::super::paused::{PausedTool, Toggled};
use super::session::GenericClient;
use tokio_postgres::Row;

/// Schema step 10.
pub(super) const PAUSED_TOOLS_TABLE: &str = "
CREATE TABLE paused_tools (
  tool       text PRIMARY KEY,
  paused_at  double precision NOT NULL,
  paused_by  text NOT NULL,
  reason     text
)";

const PAUSE: &str = "INSERT INTO paused_tools (tool, paused_at, paused_by, reason)
     VALUES ($1, extract(epoch FROM now())::float8, $2, $3)
     ON CONFLICT (tool) DO NOTHING
     RETURNING tool, paused_at, paused_by, reason";

const RESUME: &str = "DELETE FROM paused_tools WHERE tool = $1 RETURNING tool";

const ONE: &str = "SELECT tool, paused_at, paused_by, reason FROM paused_tools WHERE tool = $1";

const ALL: &str = "SELECT tool, paused_at, paused_by, reason FROM paused_tools ORDER BY tool";

/// Pause `tool`, unless it already is (the insert's row count decides).
pub(super) fn pause(
    client: &mut impl GenericClient,
    tool: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<Toggled, tokio_postgres::Error> {
    if let Some(row) = client.query_opt(PAUSE, &[&tool, &by, &reason])? {
        return Ok(Toggled::Now(Some(paused_from_row(&row))));
    }
    let found = client.query_opt(ONE, &[&tool])?;
    Ok(Toggled::Already(found.as_ref().map(paused_from_row)))
}

/// Resume `tool`, if it is paused.
pub(super) fn resume(
    client: &mut impl GenericClient,
    tool: &str,
) -> Result<Toggled, tokio_postgres::Error> {
    Ok(match client.query_opt(RESUME, &[&tool])? {
        Some(_) => Toggled::Now(None),
        None => Toggled::Already(None),
    })
}

/// Every paused tool, by name.
pub(super) fn all(
    client: &mut impl GenericClient,
) -> Result<Vec<PausedTool>, tokio_postgres::Error> {
    Ok(client
        .query(ALL, &[])?
        .iter()
        .map(paused_from_row)
        .collect())
}

fn paused_from_row(r: &Row) -> PausedTool {
    PausedTool {
        tool: r.get(0),
        paused_at: r.get(1),
        paused_by: r.get(2),
        reason: r.get(3),
    }
}
