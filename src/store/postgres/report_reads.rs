//! The reads behind the operations endpoints on PostgreSQL: a call's audit
//! timeline, its effect row, and `/healthz`'s probe (the counts of `/stats` and `/metrics`
//! are `counts`'). Each runs in the caller's read-only transaction
//! (REPEATABLE READ where it makes several statements, so they describe one
//! moment).
//!
//! This module never writes, and never reads another tenant's rows for a
//! tenant's answer.

use super::super::model::AuditEvent;
use super::super::operator::Effect;
use super::session::GenericClient;

/// A call's audit rows in the order they were written (`audit_call`).
pub(super) fn audit_timeline(
    client: &mut impl GenericClient,
    call_id: &str,
) -> Result<Vec<AuditEvent>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT ts, event, attempt, detail FROM audit WHERE call_id = $1 ORDER BY id",
            &[&call_id],
        )?
        .iter()
        .map(|r| AuditEvent {
            at: r.get(0),
            event: r.get(1),
            attempt: r.get(2),
            detail: r.get(3),
        })
        .collect())
}

/// The effect row of `call_id`, if it has one.
pub(super) fn effect(
    client: &mut impl GenericClient,
    call_id: &str,
) -> Result<Option<Effect>, tokio_postgres::Error> {
    Ok(client
        .query_opt(
            "SELECT effect_id, tool, amount, detail, created_at FROM effects WHERE call_id = $1",
            &[&call_id],
        )?
        .map(|r| Effect {
            effect_id: r.get(0),
            tool: r.get(1),
            amount: r.get(2),
            detail: r
                .get::<_, Option<String>>(3)
                .and_then(|d| serde_json::from_str(&d).ok()),
            created_at: r.get(4),
        }))
}

/// Whether the database answers a read of `calls` now.
pub(super) fn probe(client: &mut impl GenericClient) -> Result<(), tokio_postgres::Error> {
    client.query_opt("SELECT 1 FROM calls LIMIT 1", &[])?;
    Ok(())
}
