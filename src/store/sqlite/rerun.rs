//! Re-running a call on SQLite, by the rules of `store::rerun`: one writer
//! operation reads the call, checks its retention, takes its business key
//! back (if it carried one) and sends it back to `pending` with its `rerun`
//! audit row — inside the writer's transaction, so nothing moves the row
//! between the read and the update; the update still names the status and
//! attempt it read, and its row count decides; the move is noted for the
//! count tables (`count_book`).
//!
//! Never runs a tool.

use super::super::audit::Event;
use super::super::ids::now;
use super::super::model::Call;
use super::super::rerun::{rerun_with, Rerun, RerunRequest, RerunSteps};
use super::business_key::release_dead_holder;
use super::count_book;
use super::steps::{audit, group, select_call, select_tenant_call};
use crate::status::Status;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

/// One re-run, in the writer's transaction.
pub(super) fn rerun_op(
    request: RerunRequest,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Rerun> + Send + 'static {
    move |conn| {
        let mut steps = Steps {
            conn,
            now: now(),
            request: &request,
        };
        rerun_in(&mut steps)
    }
}

/// `rerun_with` on `steps`: one pass decides, inside one write transaction.
pub(super) fn rerun_in(steps: &mut Steps<'_>) -> rusqlite::Result<Rerun> {
    let request = steps.request;
    rerun_with(steps, request, 1)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
}

pub(super) struct Steps<'a> {
    pub(super) conn: &'a Connection,
    pub(super) now: f64,
    pub(super) request: &'a RerunRequest,
}

impl RerunSteps for Steps<'_> {
    type Error = rusqlite::Error;

    fn read(&mut self) -> rusqlite::Result<Option<Call>> {
        let id = &self.request.call_id;
        match &self.request.tenant {
            Some(tenant) => select_tenant_call(self.conn, tenant, id),
            None => select_call(self.conn, id),
        }
    }

    fn expired(&mut self, call: &Call) -> rusqlite::Result<bool> {
        Ok(self
            .request
            .key_ttl
            .is_some_and(|ttl| call.updated_at + ttl <= self.now))
    }

    fn hold_business_key(&mut self, call: &Call) -> rusqlite::Result<Option<String>> {
        let carried: Option<(String, String, String, f64)> = self
            .conn
            .prepare_cached(
                "SELECT tenant, tool, bkey, expires_at - created_at FROM business_keys
                  WHERE call_id = ?1",
            )?
            .query_row([&call.call_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((tenant, tool, bkey, window)) = carried else {
            return Ok(None);
        };
        release_dead_holder(self.conn, &tenant, &tool, &bkey, self.now)?;
        let held = self
            .conn
            .prepare_cached(
                "UPDATE business_keys SET holding = 1, created_at = ?2, expires_at = ?2 + ?3
                  WHERE call_id = ?1",
            )?
            .execute(params![call.call_id, self.now, window]);
        match held {
            Ok(_) => Ok(None),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => self
                .conn
                .prepare_cached(
                    "SELECT call_id FROM business_keys
                      WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3 AND holding = 1",
                )?
                .query_row(params![tenant, tool, bkey], |r| r.get(0))
                .map(Some),
            Err(e) => Err(e),
        }
    }

    fn reset(&mut self, call: &Call, detail: &str) -> rusqlite::Result<bool> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE calls
                    SET status = 'pending', result_json = NULL, error_json = NULL,
                        lease_until = NULL, owner = NULL, next_attempt_at = NULL,
                        cancel_requested_at = NULL, cancel_reason = NULL, updated_at = ?1
                  WHERE call_id = ?2 AND status IN ('failed', 'cancelled') AND attempt = ?3
                    AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.call_id = calls.call_id)",
            )?
            .execute(params![self.now, call.call_id, call.attempt])?;
        if changed == 1 {
            let id = &call.call_id;
            audit(self.conn, self.now, id, call.attempt, Event::Rerun, detail)?;
            // Its count group moves with it (`count_book`): same tenant, tool
            // and attempt, back to `pending`.
            let (tenant, tool) = (&call.tenant, &call.tool);
            let from = group(tenant, tool, call.status, call.attempt);
            count_book::moved(
                self.conn,
                from,
                group(tenant, tool, Status::Pending, call.attempt),
            )?;
        }
        Ok(changed == 1)
    }
}
