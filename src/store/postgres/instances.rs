//! Nodes and their heartbeats on PostgreSQL, and recovery: which `running`
//! calls may be taken back, and taking them. The rules are the store's (see
//! `store::instance`, where the same `Reclaimable` decides for both
//! backends), and one of PostgreSQL's own (`may_take`): another node that is
//! alive keeps its calls even once their leases lapsed — it lost the database
//! for a while and will commit and extend them when it is back. A call is
//! taken at once when its owner stopped, or is a dead pid on this host, or is
//! this node (a lease it does not hold), or has no instance (its lease alone
//! speaks); another live-looking node's only once its heartbeat is
//! `DEAD_AFTER` stale, and only by a node that has itself been in touch with
//! the database for `DEAD_AFTER` without a gap (`contact`). Heartbeat times
//! come from the database's clock, so a node whose clock is off is judged
//! by the same one.
//!
//! Never declares a live process on this host dead; a wrong verdict about
//! another host (a node paused past `DEAD_AFTER`) is safe: its completion is
//! fenced by the attempt and discarded, and `effects.call_id UNIQUE` holds.

use super::super::audit;
use super::super::instance::{pid_is_alive, Instance, Node, Reclaimable, DEAD_AFTER, NODES_LISTED};
use super::super::model::LeaseHeld;
use super::cancel::end_cancelled;
use super::session::GenericClient;

/// Record this node, and mark stopped every earlier instance on this host
/// whose pid is gone (killed: nothing else marked it). Returns how many.
pub(super) fn register(
    client: &mut impl GenericClient,
    me: &Instance,
) -> Result<usize, tokio_postgres::Error> {
    client.execute(
        "INSERT INTO instances (instance_id, pid, host, started_at, heartbeat_at)
             VALUES ($1, $2, $3, extract(epoch FROM now())::float8,
                     extract(epoch FROM now())::float8)",
        &[&me.id, &i64::from(me.pid), &me.host],
    )?;
    let same_host = client.query(
        "SELECT instance_id, pid FROM instances
          WHERE host = $1 AND stopped_at IS NULL AND instance_id <> $2",
        &[&me.host, &me.id],
    )?;
    let mut marked = 0;
    for row in same_host {
        let (instance_id, pid): (String, i64) = (row.get(0), row.get(1));
        if !u32::try_from(pid).is_ok_and(pid_is_alive) {
            mark_stopped(client, &instance_id)?;
            marked += 1;
        }
    }
    Ok(marked)
}

pub(super) fn heartbeat(
    client: &mut impl GenericClient,
    me: &Instance,
) -> Result<(), tokio_postgres::Error> {
    client.execute(
        "UPDATE instances SET heartbeat_at = extract(epoch FROM now())::float8
          WHERE instance_id = $1",
        &[&me.id],
    )?;
    Ok(())
}

pub(super) fn mark_stopped(
    client: &mut impl GenericClient,
    instance_id: &str,
) -> Result<(), tokio_postgres::Error> {
    client.execute(
        "UPDATE instances SET stopped_at = extract(epoch FROM now())::float8
          WHERE instance_id = $1 AND stopped_at IS NULL",
        &[&instance_id],
    )?;
    Ok(())
}

/// The `running` calls recovery may take back, with what their owners
/// left behind, and the database's time: `calls_running` finds them.
const RECLAIMABLE: &str = "SELECT c.call_id, c.attempt, c.owner, c.lease_until, i.heartbeat_at, i.stopped_at,
            i.host, i.pid, extract(epoch FROM now())::float8 AS now,
            c.cancel_requested_at IS NOT NULL AS cancel_asked
       FROM calls c
       LEFT JOIN instances i
         ON c.owner LIKE '%@%' AND i.instance_id = split_part(c.owner, '@', 2)
      WHERE c.status = 'running'
        AND (c.lease_until IS NULL OR c.lease_until <= extract(epoch FROM now())::float8
             OR i.stopped_at IS NOT NULL OR i.heartbeat_at <= extract(epoch FROM now())::float8 - $1)";

/// Each taken back only while still `running` under the attempt that was
/// read (the row count decides), with its `recover` audit row, in one
/// statement; rows locked in `call_id` order (see `sql::CLAIM_NAMED`), and
/// one being changed right now skipped until the next pass.
const TAKE_BACK: &str = "WITH taken AS MATERIALIZED (
       SELECT calls.call_id, x.attempt, x.why
         FROM calls JOIN unnest($1::text[], $2::int8[], $3::text[]) AS x(call_id, attempt, why)
           ON calls.call_id = x.call_id AND calls.attempt = x.attempt
        WHERE calls.status = 'running' AND calls.cancel_requested_at IS NULL
        ORDER BY calls.call_id FOR UPDATE OF calls SKIP LOCKED
     ), r AS (
       UPDATE calls SET status = 'pending', lease_until = NULL, owner = NULL,
              updated_at = extract(epoch FROM now())::float8
         FROM taken WHERE calls.call_id = taken.call_id AND calls.status = 'running'
       RETURNING calls.call_id, taken.attempt, taken.why, calls.updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'recover', why FROM r
     )
     SELECT call_id FROM r";

/// A reclaimable call, and whether its cancel was asked.
type Candidate = (Reclaimable, bool);

/// Return reclaimable `running` calls to `pending` — or, their cancel
/// asked, end them `cancelled` (`cancel::end_cancelled`); their ids.
/// `may_judge_others` is asked once the candidates are read: whether this
/// node has been in touch with the database long enough to judge another
/// node dead by its heartbeat (`contact`).
pub(super) fn recover(
    client: &mut impl GenericClient,
    me: &Instance,
    running_here: &[LeaseHeld],
    may_judge_others: impl FnOnce() -> bool,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let dead_after = DEAD_AFTER.as_secs_f64();
    let read: Vec<Candidate> = client
        .query(RECLAIMABLE, &[&dead_after])?
        .iter()
        .map(|r| {
            let call = Reclaimable {
                call_id: r.get(0),
                attempt: r.get(1),
                owner: r.get(2),
                lease_until: r.get(3),
                heartbeat_at: r.get(4),
                stopped_at: r.get(5),
                host: r.get(6),
                pid: r
                    .get::<_, Option<i64>>(7)
                    .and_then(|p| u32::try_from(p).ok()),
                now: r.get(8),
            };
            (call, r.get::<_, bool>(9))
        })
        .collect();
    let judging = may_judge_others();
    let (asked, candidates): (Vec<Candidate>, Vec<Candidate>) = read
        .into_iter()
        .filter(|(c, _)| !c.must_stay(me, running_here) && may_take(c, me, judging))
        .partition(|(_, cancel_asked)| *cancel_asked);
    let mut taken = Vec::new();
    for (call, _) in asked {
        let detail = audit::recovered_after_cancel(call.attempt, &call.why());
        if end_cancelled(client, &call.call_id, call.attempt, &detail)? {
            taken.push(call.call_id);
        }
    }
    let candidates: Vec<Reclaimable> = candidates.into_iter().map(|(c, _)| c).collect();
    if candidates.is_empty() {
        return Ok(taken);
    }
    let ids: Vec<&str> = candidates.iter().map(|c| c.call_id.as_str()).collect();
    let attempts: Vec<i64> = candidates.iter().map(|c| c.attempt).collect();
    let whys: Vec<String> = candidates.iter().map(Reclaimable::why).collect();
    let rows = client.query(TAKE_BACK, &[&ids, &attempts, &whys])?;
    taken.extend(rows.iter().map(|r| r.get(0)));
    Ok(taken)
}

/// PostgreSQL's rule beyond `Reclaimable::must_stay`: another node that is
/// alive keeps its calls even once their leases lapsed. Its leases lapse
/// when it cannot reach the database (an outage, a frozen server): it then
/// holds the completions of the calls it finished meanwhile and goes on
/// running the rest, and commits and extends them when it is back. Taking
/// them at once would run them a second time.
///
/// So a call is taken when its owner is certainly gone (its instance
/// stopped, or its pid gone from this host), or is this node (a lease it
/// does not hold: its claim's answer was lost), or has no instance to
/// judge by (its lease alone speaks); otherwise only when its heartbeat is
/// `DEAD_AFTER` stale — and only by a node `judging` others at all, that is,
/// one in touch with the database for `DEAD_AFTER` without a gap, so that
/// after an outage every node had as long to heart-beat again as a live
/// node ever gets.
fn may_take(call: &Reclaimable, me: &Instance, judging: bool) -> bool {
    if call.owner_stopped()
        || call.owned_by(me)
        || !call.owner_registered()
        || call.owner_is_dead_here(me)
    {
        return true;
    }
    judging && call.heartbeat_is_stale()
}

/// The instances heard from last (`NODES_LISTED`), each judged alive or not
/// by the database's clock (the one their heartbeats are written by), with
/// the calls running under their owners (`calls_running`: as few as there
/// are workers).
pub(super) fn nodes(client: &mut impl GenericClient) -> Result<Vec<Node>, tokio_postgres::Error> {
    let running: Vec<(String, i64)> = client
        .query(
            "SELECT split_part(owner, '@', 2), count(*) FROM calls
              WHERE status = 'running' AND owner LIKE '%@%'
              GROUP BY split_part(owner, '@', 2)",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let rows = client.query(
        "SELECT instance_id, host, pid, started_at, heartbeat_at, stopped_at,
                extract(epoch FROM now())::float8
           FROM instances ORDER BY heartbeat_at DESC LIMIT $1",
        &[&(NODES_LISTED as i64)],
    )?;
    Ok(rows
        .iter()
        .map(|r| {
            let node = Node {
                instance_id: r.get(0),
                host: r.get(1),
                pid: r.get(2),
                started_at: r.get(3),
                heartbeat_at: r.get(4),
                stopped_at: r.get(5),
                alive: false,
                running: 0,
            };
            node.judged(r.get(6), &running)
        })
        .collect())
}
