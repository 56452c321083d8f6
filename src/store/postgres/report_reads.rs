//! The reads behind the operations endpoints on PostgreSQL: `/stats`
//! counts, a call's audit timeline, the backlog a metrics scrape reports,
//! and `/healthz`'s probe. Each runs in the caller's read-only transaction
//! (REPEATABLE READ where it makes several statements, so they describe one
//! moment).
//!
//! This module never writes, and never reads another tenant's rows for a
//! tenant's answer.

use super::super::model::{AuditEvent, Backlog, CallCounts, Scope};
use super::session::GenericClient;

/// Calls in all, by status, and by attempt; and the effects.
pub(super) fn counts(
    client: &mut impl GenericClient,
    scope: Scope<'_>,
) -> Result<(CallCounts, i64), ::postgres::Error> {
    let tenant = match scope {
        Scope::All => None,
        Scope::Tenant(t) => Some(t),
    };
    // `$1 IS NULL OR tenant = $1`: one statement for both scopes; the
    // planner sees the parameter, so a tenant's count uses
    // `calls_tenant_idem_key` and the whole count a scan.
    let rows = client.query(
        "SELECT status, attempt, count(*) FROM calls
          WHERE $1::text IS NULL OR tenant = $1
          GROUP BY status, attempt ORDER BY status, attempt",
        &[&tenant],
    )?;
    let counts = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let effects = match tenant {
        None => client
            .query_one("SELECT count(*) FROM effects", &[])?
            .get(0),
        Some(t) => client
            .query_one(
                "SELECT count(*) FROM effects e JOIN calls c ON c.call_id = e.call_id
                  WHERE c.tenant = $1",
                &[&t],
            )?
            .get(0),
    };
    Ok((counts, effects))
}

/// A call's audit rows in the order they were written (`audit_call`).
pub(super) fn audit_timeline(
    client: &mut impl GenericClient,
    call_id: &str,
) -> Result<Vec<AuditEvent>, ::postgres::Error> {
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

/// Calls by status and the oldest pending call's creation time
/// (`calls_pending` gives the oldest in creation order).
pub(super) fn backlog(client: &mut impl GenericClient) -> Result<Backlog, ::postgres::Error> {
    let calls_by_status = client
        .query(
            "SELECT status, count(*) FROM calls GROUP BY status ORDER BY status",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let oldest_pending_created_at = client
        .query_opt(
            "SELECT created_at FROM calls WHERE status = 'pending' ORDER BY created_seq LIMIT 1",
            &[],
        )?
        .map(|r| r.get(0));
    Ok(Backlog {
        calls_by_status,
        oldest_pending_created_at,
    })
}

/// Whether the database answers a read of `calls` now.
pub(super) fn probe(client: &mut impl GenericClient) -> Result<(), ::postgres::Error> {
    client.query_opt("SELECT 1 FROM calls LIMIT 1", &[])?;
    Ok(())
}
