//! Every statement of the state machine on PostgreSQL, each beside the rule
//! it implements. Most operations are ONE statement — the transition and its
//! audit row (and an effect row) in data-modifying CTEs — so each commits
//! atomically in one round trip, and no transaction of ours stays open
//! while the network or the client waits.
//!
//! Times come from the database's clock (`now()`, the start of the
//! statement's transaction), never the node's: nodes whose clocks disagree
//! still agree on whether a lease has expired.
//!
//! Every statement of the wing is written out whole, never stitched together,
//! so that it can be pasted into `psql` as it stands; `tests/it/pg_statements.rs`
//! prepares each one on a migrated database.
//!
//! Transitions are conditional `UPDATE`s whose row count decides; a `SELECT`
//! before them is only ever a shortcut. This module never begins or ends a
//! transaction of its own (the caller does, where there is more than one
//! statement), and never runs a tool.

use super::super::audit::{self, Event};
use super::super::ids::stored_effect_id;
use super::super::model::{Call, CallProgress, Created, CreatedClaimed, DueCall, Lease, NewCall};
use super::super::options::DueLimits;
use super::session::GenericClient;
use super::steps::{call_from_row, with_fresh_call_id};
use crate::status::Status;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Create-or-get in one statement, `$1`..`$9` the new call; `$10` and
/// `$11`, when not NULL, a lease of `$10` seconds from the database's clock
/// to owner `$11`: the new call is then created already claimed, `running`
/// under attempt 1, audited `created` then `claimed` (the detail a claim
/// writes) — unless its tool is paused (`paused_tools`: `claim` then names
/// no owner) — and otherwise `pending`, audited `created`.
///
/// `ON CONFLICT ... DO UPDATE` (a no-op update of the key to itself) rather
/// than `DO NOTHING` and a second read: under READ COMMITTED that read could
/// miss the row (a purge between the two statements) — while `DO UPDATE`
/// waits for a concurrent inserter of the same key to finish, locks the
/// winning row, and returns its latest version from this same statement, so
/// exactly one row always comes back. The row is new exactly when it carries
/// the call id this statement drew (ids are drawn fresh for every attempt);
/// that is sturdier than the `xmax <> 0` idiom, which reads a detail of the
/// heap. The audit rows are written only for a new call, by the same
/// statement, each only up to the attempt the call was created with.
const CREATE_OR_GET: &str = "WITH claim AS (
       SELECT CASE WHEN EXISTS (SELECT 1 FROM paused_tools WHERE tool = $7) THEN NULL
                   ELSE $11::text END AS owner
     ), ins AS (
       INSERT INTO calls AS c (call_id, tenant, idem_key, fingerprint, client_id, seq, tool,
                              args_json, status, attempt, lease_until, owner, effect_id,
                              created_at, updated_at)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8,
              CASE WHEN claim.owner IS NULL THEN 'pending' ELSE 'running' END,
              CASE WHEN claim.owner IS NULL THEN 0 ELSE 1 END,
              CASE WHEN claim.owner IS NULL THEN NULL
                   ELSE extract(epoch FROM now())::float8 + $10 END,
              claim.owner, $9,
              extract(epoch FROM now())::float8, extract(epoch FROM now())::float8
         FROM claim
       ON CONFLICT (tenant, idem_key) DO UPDATE SET idem_key = EXCLUDED.idem_key
       RETURNING call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                 status, result_json, error_json, attempt, lease_until, owner, effect_id,
                 created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json,
                 (c.call_id <> $1) AS existed
     ), audited AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT ins.created_at, ins.call_id, e.attempt, e.event, e.detail
         FROM ins CROSS JOIN LATERAL (VALUES (1, 0::int8, 'created', ins.tool),
                                             (2, 1::int8, 'claimed', $11::text || ' attempt=1'))
                                     AS e(ord, attempt, event, detail)
        WHERE NOT ins.existed AND e.attempt <= ins.attempt ORDER BY e.ord
     )
     SELECT * FROM ins";

pub(super) fn create_or_get(
    client: &mut impl GenericClient,
    new: &NewCall,
) -> Result<Created, tokio_postgres::Error> {
    Ok(create_or_get_with(client, new, None)?.created)
}

/// `create_or_get` whose new call is leased to `owner` for `lease_secs`;
/// a known key is answered as `create_or_get` answers it, with no lease.
pub(super) fn create_claimed(
    client: &mut impl GenericClient,
    new: &NewCall,
    owner: &str,
    lease_secs: f64,
) -> Result<CreatedClaimed, tokio_postgres::Error> {
    create_or_get_with(client, new, Some((owner, lease_secs)))
}

fn create_or_get_with(
    client: &mut impl GenericClient,
    new: &NewCall,
    first_claim: Option<(&str, f64)>,
) -> Result<CreatedClaimed, tokio_postgres::Error> {
    // A gated call waits for a decision: never created claimed.
    if let Some(gate) = new.gate {
        let (call, existed) = super::approval::create_gated(client, new, gate)?;
        return resolve(client, new, call, existed);
    }
    let (owner, lease_secs) = first_claim.unzip();
    let row = with_fresh_call_id(|call_id, effect_id| {
        let params: [&(dyn ToSql + Sync); 11] = [
            &call_id,
            &new.tenant,
            &new.idem_key,
            &new.fingerprint,
            &new.client_id,
            &new.seq,
            &new.tool,
            &new.args_json,
            &effect_id,
            &lease_secs,
            &owner,
        ];
        client.query_one(CREATE_OR_GET, &params)
    })?;
    let existed: bool = row.get("existed");
    resolve(client, new, call_from_row(&row)?, existed)
}

/// What create-or-get answers for the row its statement returned: a new
/// call (with its lease when it was created claimed), or the key's existing
/// call resolved as a replay, a conflict or a retry reset.
fn resolve(
    client: &mut impl GenericClient,
    new: &NewCall,
    call: Call,
    existed: bool,
) -> Result<CreatedClaimed, tokio_postgres::Error> {
    if !existed {
        return Ok(CreatedClaimed {
            lease: call.lease(),
            created: Created::New(call),
        });
    }
    let created = if call.fingerprint != new.fingerprint {
        Created::Conflict(call)
    } else if !call.is_retryable_failure() {
        Created::Existing(call)
    } else {
        match reset_failed(client, &call.call_id)? {
            Some(reset) => Created::RetryReset(reset),
            None => Created::Existing(call),
        }
    };
    Ok(CreatedClaimed {
        created,
        lease: None,
    })
}

/// A same-key retry of a retryable failure: back to `pending`, if it is
/// still `failed` (another retry may have reset it first: the row count decides).
fn reset_failed(
    client: &mut impl GenericClient,
    call_id: &str,
) -> Result<Option<Call>, tokio_postgres::Error> {
    const RESET: &str = "WITH r AS (
           UPDATE calls SET status = 'pending', result_json = NULL, error_json = NULL,
                  lease_until = NULL, owner = NULL, updated_at = extract(epoch FROM now())::float8
            WHERE call_id = $1 AND status = 'failed'
           RETURNING call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                     status, result_json, error_json, attempt, lease_until, owner, effect_id,
                     created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json
         ), a AS (
           INSERT INTO audit (ts, call_id, attempt, event, detail)
           SELECT updated_at, call_id, attempt, 'retry_reset', 'after attempt ' || attempt FROM r
         )
         SELECT * FROM r";
    client
        .query_opt(RESET, &[&call_id])?
        .map(|r| call_from_row(&r))
        .transpose()
}

/// `claim_many`: the named calls, each only if claimable now (a lapsed lease
/// whose cancel was asked is not: recovery ends it `cancelled`; nor is any
/// call of a paused tool, `paused_tools`). The rows are
/// locked in `call_id` order, as every statement here that takes several
/// rows' locks does (`extend`, recovery), so two of them never deadlock; a row
/// another statement holds at this moment is skipped (it is being claimed or
/// finished by someone else) and answered `None`, as a lost claim.
///
/// Every claim statement ends the same way (here, `CLAIM_DUE`, and
/// `limits::CLAIM_LIMITED`, held to one text by a test): the rows `due`
/// picked and locked go to `running` under a new attempt, with a lease from
/// the database's clock (`$2` seconds) and owner `$3`, each audited
/// `claimed`.
const CLAIM_NAMED: &str = "WITH due AS MATERIALIZED (
       SELECT call_id FROM calls
        WHERE call_id = ANY($1)
          AND ((status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8))
               OR (status = 'running' AND cancel_requested_at IS NULL
                   AND lease_until <= extract(epoch FROM now())::float8))
          AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
        ORDER BY call_id FOR UPDATE SKIP LOCKED
     ), u AS (
       UPDATE calls SET status = 'running', attempt = calls.attempt + 1,
              lease_until = extract(epoch FROM now())::float8 + $2, owner = $3,
              updated_at = extract(epoch FROM now())::float8, next_attempt_at = NULL
         FROM due WHERE calls.call_id = due.call_id
       RETURNING calls.call_id, calls.attempt, calls.tool, calls.args_json,
                 calls.effect_id, calls.lease_until, calls.updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'claimed', $3::text || ' attempt=' || attempt FROM u
     )
     SELECT call_id, attempt, tool, args_json, effect_id, lease_until FROM u";

/// `claim_due_within`: the oldest due calls nobody else is claiming at this
/// moment, at most `$1` of them, and of each capped tool `$4[i]` at most
/// `$5[i]` (this node's free slots for it; zero for a tool at its cap);
/// never a call of a paused tool (`paused_tools`), whatever this node has
/// heard of the pause.
/// `FOR UPDATE SKIP LOCKED` makes claimers on several nodes pass over each
/// other's rows instead of queueing on them; the lock holds until the update
/// in the same statement has moved the row to `running`.
///
/// Why a capped tool cannot be over-claimed: its calls come from ONE branch
/// only — the `LATERAL` subquery, whose `LIMIT` is that tool's free slots —
/// because the other branch excludes every tool named in `$4`; the outer
/// `LIMIT $1` only drops rows, never adds any, and the `UPDATE` touches
/// exactly the rows `due` chose. So the statement returns at most `$5[i]`
/// calls of tool `$4[i]`, whatever else is due.
///
/// Why a row locked but not chosen is harmless: each branch locks up to its
/// own limit, and the outer `LIMIT` may then leave some locked rows out.
/// Those rows are not updated; their locks end with this statement's
/// transaction (it is the whole transaction: autocommit), and a claimer
/// that met them meanwhile skipped them (`SKIP LOCKED`, never waits), so at
/// worst they are claimed by the next poll.
const CLAIM_DUE: &str = "WITH capped AS (
       SELECT tool, free FROM unnest($4::text[], $5::int8[]) AS t(tool, free)
     ), capped_due AS MATERIALIZED (
       SELECT d.call_id, d.created_seq
         FROM capped CROSS JOIN LATERAL (
           SELECT call_id, created_seq FROM calls
            WHERE status = 'pending' AND tool = capped.tool
              AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8)
              AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = capped.tool)
            ORDER BY created_seq LIMIT capped.free FOR UPDATE SKIP LOCKED
         ) d
     ), other_due AS MATERIALIZED (
       SELECT call_id, created_seq FROM calls
        WHERE status = 'pending' AND tool <> ALL($4::text[])
          AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8)
          AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
        ORDER BY created_seq LIMIT $1 FOR UPDATE SKIP LOCKED
     ), due AS MATERIALIZED (
       SELECT call_id FROM (
         SELECT call_id, created_seq FROM capped_due
         UNION ALL
         SELECT call_id, created_seq FROM other_due
       ) candidates
       ORDER BY created_seq LIMIT $1
     ), u AS (
       UPDATE calls SET status = 'running', attempt = calls.attempt + 1,
              lease_until = extract(epoch FROM now())::float8 + $2, owner = $3,
              updated_at = extract(epoch FROM now())::float8, next_attempt_at = NULL
         FROM due WHERE calls.call_id = due.call_id
       RETURNING calls.call_id, calls.attempt, calls.tool, calls.args_json,
                 calls.effect_id, calls.lease_until, calls.updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'claimed', $3::text || ' attempt=' || attempt FROM u
     )
     SELECT call_id, attempt, tool, args_json, effect_id, lease_until FROM u";

pub(super) fn claim_named(
    client: &mut impl GenericClient,
    call_ids: &[String],
    owner: &str,
    lease_secs: f64,
) -> Result<Vec<Lease>, tokio_postgres::Error> {
    let rows = client.query(CLAIM_NAMED, &[&call_ids, &lease_secs, &owner])?;
    Ok(rows.iter().map(lease_from_row).collect())
}

pub(super) fn claim_due_within(
    client: &mut impl GenericClient,
    limits: &DueLimits,
    owner: &str,
    lease_secs: f64,
) -> Result<Vec<Lease>, tokio_postgres::Error> {
    let total = limits.total as i64;
    let tools: Vec<&str> = limits.per_tool.iter().map(|(t, _)| t.as_str()).collect();
    let free: Vec<i64> = limits.per_tool.iter().map(|(_, n)| *n as i64).collect();
    let rows = client.query(CLAIM_DUE, &[&total, &lease_secs, &owner, &tools, &free])?;
    Ok(rows.iter().map(lease_from_row).collect())
}

fn lease_from_row(r: &Row) -> Lease {
    let call_id: String = r.get(0);
    Lease {
        effect_id: stored_effect_id(r.get(4), &call_id),
        call_id,
        attempt: r.get(1),
        tool: r.get(2),
        args_json: r.get(3),
        lease_until: r.get(5),
    }
}

/// What a fenced completion writes.
pub(super) struct Finish<'a> {
    pub status: Status,
    pub result_json: Option<&'a str>,
    pub error_json: Option<&'a str>,
    /// The effect row, for a success that has one: amount and detail.
    pub effect: Option<(Option<i64>, Option<String>)>,
    pub event: Event,
    pub detail: &'a str,
}

/// The fence: the terminal update applies only while the call is `running`
/// under this lease's attempt — and, short of a success, while its cancel
/// was not asked (the caller then ends it `cancelled`, `cancel`). The effect row (`ON CONFLICT DO NOTHING`:
/// `effects.call_id UNIQUE` is the last gate) and the audit row are written
/// by the same statement, so they commit with `succeeded` or not at all.
/// The effect row carries the lease's effect id: the one the call stores
/// (and its tool sent downstream). Returns whether it applied.
pub(super) fn finish_fenced(
    client: &mut impl GenericClient,
    lease: &Lease,
    finish: &Finish<'_>,
) -> Result<bool, tokio_postgres::Error> {
    const FINISH: &str = "WITH done AS (
           UPDATE calls SET status = $3, result_json = $4, error_json = $5,
                  lease_until = NULL, owner = NULL, updated_at = extract(epoch FROM now())::float8
            WHERE call_id = $1 AND status = 'running' AND attempt = $2
              AND ($3 = 'succeeded' OR cancel_requested_at IS NULL)
           RETURNING call_id, tool, updated_at
         ), effect AS (
           INSERT INTO effects (effect_id, call_id, tool, amount, detail, created_at)
           SELECT $11::text, call_id, tool, $6::int8, $7::text, updated_at FROM done WHERE $8::bool
           ON CONFLICT DO NOTHING
         ), a AS (
           INSERT INTO audit (ts, call_id, attempt, event, detail)
           SELECT updated_at, call_id, $2::int8, $9::text, $10::text FROM done
         )
         SELECT count(*) FROM done";
    let (amount, detail) = finish.effect.clone().unwrap_or((None, None));
    let has_effect = finish.effect.is_some();
    let row = client.query_one(
        FINISH,
        &[
            &lease.call_id,
            &lease.attempt,
            &finish.status.as_str(),
            &finish.result_json,
            &finish.error_json,
            &amount,
            &detail,
            &has_effect,
            &finish.event.as_str(),
            &finish.detail,
            &lease.effect_id,
        ],
    )?;
    Ok(row.get::<_, i64>(0) == 1)
}

/// A retryable failure with attempts left: back to `pending`, due no earlier
/// than `delay` from now, fenced like a completion (its cancel not asked).
pub(super) fn retry_later(
    client: &mut impl GenericClient,
    lease: &Lease,
    error_json: &str,
    delay_secs: f64,
    detail: &str,
) -> Result<bool, tokio_postgres::Error> {
    const RETRY: &str = "WITH r AS (
           UPDATE calls SET status = 'pending', error_json = $3,
                  next_attempt_at = extract(epoch FROM now())::float8 + $4,
                  lease_until = NULL, owner = NULL, updated_at = extract(epoch FROM now())::float8
            WHERE call_id = $1 AND status = 'running' AND attempt = $2
              AND cancel_requested_at IS NULL
           RETURNING call_id, updated_at
         ), a AS (
           INSERT INTO audit (ts, call_id, attempt, event, detail)
           SELECT updated_at, call_id, $2::int8, 'retry_scheduled', $5::text FROM r
         )
         SELECT count(*) FROM r";
    let row = client.query_one(
        RETRY,
        &[
            &lease.call_id,
            &lease.attempt,
            &error_json,
            &delay_secs,
            &detail,
        ],
    )?;
    Ok(row.get::<_, i64>(0) == 1)
}

/// Give back a lease (a stopping node): `pending` again, fenced (its cancel
/// not asked), audited with `detail` (`audit::released`).
pub(super) fn release(
    client: &mut impl GenericClient,
    lease: &Lease,
    detail: &str,
) -> Result<bool, tokio_postgres::Error> {
    const RELEASE: &str = "WITH r AS (
           UPDATE calls SET status = 'pending', lease_until = NULL, owner = NULL,
                  updated_at = extract(epoch FROM now())::float8
            WHERE call_id = $1 AND status = 'running' AND attempt = $2
              AND cancel_requested_at IS NULL
           RETURNING call_id, updated_at
         ), a AS (
           INSERT INTO audit (ts, call_id, attempt, event, detail)
           SELECT updated_at, call_id, $2::int8, 'released', $3 FROM r
         )
         SELECT count(*) FROM r";
    let row = client.query_one(RELEASE, &[&lease.call_id, &lease.attempt, &detail])?;
    Ok(row.get::<_, i64>(0) == 1)
}

/// Whether this lease's attempt already recorded `event`: a completion
/// handed to the store again after an answer that never came back (the
/// connection dropped past its deadline, or died during the `COMMIT`) may
/// find its first hand-off committed. Only the attempt's holder completes
/// it, so the row is this completion's own, and it is not stale.
pub(super) fn already_recorded(
    client: &mut impl GenericClient,
    lease: &Lease,
    event: Event,
) -> Result<bool, tokio_postgres::Error> {
    const RECORDED: &str = "SELECT EXISTS (SELECT 1 FROM audit
                              WHERE call_id = $1 AND attempt = $2 AND event = $3)";
    let row = client.query_one(RECORDED, &[&lease.call_id, &lease.attempt, &event.as_str()])?;
    Ok(row.get(0))
}

/// A completion that lost its lease changes nothing but the audit trail.
pub(super) fn audit_stale(
    client: &mut impl GenericClient,
    lease: &Lease,
    would_have: Event,
) -> Result<(), tokio_postgres::Error> {
    let detail = audit::stale_completion(lease.attempt, would_have);
    let event = Event::StaleCompletion;
    audit_row(client, &lease.call_id, lease.attempt, event, &detail)
}

fn audit_row(
    client: &mut impl GenericClient,
    call_id: &str,
    attempt: i64,
    event: Event,
    detail: &str,
) -> Result<(), tokio_postgres::Error> {
    client.execute(
        "INSERT INTO audit (ts, call_id, attempt, event, detail)
         VALUES (extract(epoch FROM now())::float8, $1, $2, $3, $4)",
        &[&call_id, &attempt, &event.as_str(), &detail],
    )?;
    Ok(())
}

/// Extend each lease by `lease_secs` from now, only while its call is
/// `running` under the lease's attempt, and store the progress its tool
/// reported (`progress[i]` for `leases[i]`, if any) in the same update;
/// the (call, attempt) pairs still held.
pub(super) fn extend(
    client: &mut impl GenericClient,
    leases: &[Lease],
    progress: &[Option<CallProgress>],
    lease_secs: f64,
) -> Result<Vec<(String, i64)>, tokio_postgres::Error> {
    const EXTEND: &str = "WITH held AS MATERIALIZED (
           SELECT calls.call_id, l.progress
             FROM calls JOIN unnest($1::text[], $2::int8[], $4::text[])
                               AS l(call_id, attempt, progress)
               ON calls.call_id = l.call_id AND calls.attempt = l.attempt
            WHERE calls.status = 'running'
            ORDER BY calls.call_id FOR UPDATE OF calls
         )
         UPDATE calls SET lease_until = extract(epoch FROM now())::float8 + $3,
                          progress_json = coalesce(held.progress, calls.progress_json)
           FROM held WHERE calls.call_id = held.call_id AND calls.status = 'running'
         RETURNING calls.call_id, calls.attempt";
    let ids: Vec<&str> = leases.iter().map(|l| l.call_id.as_str()).collect();
    let attempts: Vec<i64> = leases.iter().map(|l| l.attempt).collect();
    let reports: Vec<Option<String>> = (0..leases.len())
        .map(|i| progress.get(i).and_then(Option::as_ref))
        .map(|p| p.map(|p| p.to_json().to_string()))
        .collect();
    let rows = client.query(EXTEND, &[&ids, &attempts, &lease_secs, &reports])?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub(super) fn due_calls(
    client: &mut impl GenericClient,
    limit: usize,
) -> Result<Vec<DueCall>, tokio_postgres::Error> {
    const DUE: &str = "SELECT call_id, tool FROM calls
          WHERE status = 'pending'
            AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8)
            AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
          ORDER BY created_seq LIMIT $1";
    let rows = client.query(DUE, &[&(limit as i64)])?;
    Ok(rows
        .iter()
        .map(|r| DueCall {
            call_id: r.get(0),
            tool: r.get(1),
        })
        .collect())
}

/// The `input_answered` row (`$2`, the answers) of the tenant's (`$3`) call
/// `$1`, under its current attempt, written only while it waits for a
/// decision under fingerprint `$4`; whether it was.
pub(super) fn note_input_answers(
    client: &mut impl GenericClient,
    tenant: &str,
    call_id: &str,
    fingerprint: &str,
    answers: &str,
) -> Result<bool, tokio_postgres::Error> {
    const NOTE: &str = "INSERT INTO audit (ts, call_id, attempt, event, detail)
         SELECT extract(epoch FROM now())::float8, call_id, attempt, 'input_answered', $2
           FROM calls
          WHERE call_id = $1 AND tenant = $3 AND status = 'awaiting_approval'
            AND fingerprint = $4";
    Ok(client.execute(NOTE, &[&call_id, &answers, &tenant, &fingerprint])? == 1)
}

/// The `replayed_by_content` row (`$2`) of the tenant's (`$3`) call `$1`,
/// under its current attempt; whether the call was there.
pub(super) fn note_replay_by_content(
    client: &mut impl GenericClient,
    tenant: &str,
    call_id: &str,
    detail: &str,
) -> Result<bool, tokio_postgres::Error> {
    const NOTE: &str = "INSERT INTO audit (ts, call_id, attempt, event, detail)
         SELECT extract(epoch FROM now())::float8, call_id, attempt, 'replayed_by_content', $2
           FROM calls WHERE call_id = $1 AND tenant = $3";
    Ok(client.execute(NOTE, &[&call_id, &detail, &tenant])? == 1)
}
