//! What the service does with its SQLite file, by the service in this
//! process: the seed's constraints and indexes (and query plans that use
//! them), a database made by the seed's exact DDL used as it is, a database
//! locked past the busy timeout answered with 503 and then retried, a
//! retry of a call in progress answered without the writer, a writer
//! stalled by that lock for longer than a lease keeping its running call,
//! and a completion that lock refused committed later, not run again.

use crate::support;
use crate::support::Counts;
use crate::support::Http;
use crate::support::{audit_events, charge, count, open_db, Local, TempDb};
use idempotent_tool::store::list_sql::sqlite;
use serde_json::json;

/// The schema carries the seed's constraints, and the seed's duplicate-effects
/// query finds nothing after a mixed workload.
#[test]
fn schema_has_unique_constraints_and_no_duplicate_effects() {
    let db = TempDb::new("schema");
    let server = Local::start(&db, &[]);
    for i in 0..20 {
        server.post(&format!("dup-{}", i % 5), &charge(1 + (i % 5)));
    }
    let (_, last) = server.post("dup-4", &charge(5));
    server.wait_terminal(last["call_id"].as_str().unwrap());
    let conn = server.sql();
    let unique_indexes: Vec<(String, String)> = conn
        .prepare(
            "SELECT m.name, ii.name FROM sqlite_master m, pragma_index_list(m.name) il, pragma_index_info(il.name) ii
              WHERE m.type = 'table' AND il.\"unique\" = 1 ORDER BY 1, 2",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for expected in [
        ("calls", "call_id"),
        ("calls", "idem_key"),
        ("effects", "call_id"),
        ("effects", "effect_id"),
        // One live call per business key (migration 8).
        ("business_keys", "bkey"),
    ] {
        assert!(
            unique_indexes.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not unique: {unique_indexes:?}"
        );
    }
    let index_names = text_column(
        &conn,
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_%' ORDER BY name",
        0,
    );
    assert_eq!(
        index_names,
        [
            "idx_approvals_open",
            "idx_audit_call",
            "idx_bulk_jobs_running",
            "idx_business_keys_key",
            "idx_business_keys_live",
            "idx_calls_client_seq",
            "idx_calls_error",
            "idx_calls_status",
            "idx_notifications_due"
        ]
    );
    // The client index is partial (calls without a client_id skip it), and a
    // lookup by client still finds it.
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT call_id FROM calls WHERE client_id = 'c' AND seq = 1",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("idx_calls_client_seq"), "{plan}");
    // The list reads each (status, tenant, tool) group of idx_calls_status
    // backwards between two ids, every tenant's calls by the primary key,
    // and a key prefix as a range of the (tenant, idem_key) index: no scan,
    // no sort, whatever the filters (docs/performance.md shows them too).
    let columns = text_column(
        &conn,
        "SELECT name FROM pragma_index_info('idx_calls_status') ORDER BY seqno",
        0,
    );
    assert_eq!(columns, ["status", "tenant", "tool", "call_id"]);
    for (sql, uses) in [
        (sqlite::GROUP_IDS, "SEARCH calls USING COVERING INDEX idx_calls_status (status=? AND tenant=? AND tool=? AND call_id>? AND call_id<?)"),
        (sqlite::GROUP_IDS_FILTERED, "SEARCH calls USING INDEX idx_calls_status (status=? AND tenant=? AND tool=? AND call_id>? AND call_id<?)"),
        (sqlite::ALL_IDS, "SEARCH calls USING COVERING INDEX sqlite_autoindex_calls_1 (call_id>? AND call_id<?)"),
        (sqlite::ALL_IDS_FILTERED, "SEARCH calls USING INDEX sqlite_autoindex_calls_1 (call_id>? AND call_id<?)"),
    ] {
        let plan = plan_of(&conn, sql);
        assert_eq!(plan, [uses], "{sql}");
    }
    let plan = plan_of(&conn, sqlite::PREFIX_COUNT);
    assert!(
        plan.iter().any(|step| step.contains(
            "COVERING INDEX sqlite_autoindex_calls_2 (tenant=? AND idem_key>? AND idem_key<?)"
        )),
        "{plan:?}"
    );
    // The claim's scan of due calls and recovery's of running ones still
    // search idx_calls_status by status (their statements, as in sql.rs and
    // instances.rs).
    for sql in [
        "SELECT call_id, tool FROM calls
          WHERE status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= ?1)
          ORDER BY lease_until, rowid LIMIT ?2",
        "SELECT c.call_id FROM calls c LEFT JOIN instances i
            ON c.owner LIKE '%@%' AND i.instance_id = substr(c.owner, instr(c.owner, '@') + 1)
          WHERE c.status = 'running' AND (c.lease_until IS NULL OR c.lease_until <= ?1
                OR i.stopped_at IS NOT NULL OR i.heartbeat_at <= ?2)",
    ] {
        let plan = plan_of(&conn, sql);
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX idx_calls_status (status=?)")),
            "{plan:?}"
        );
    }
    let duplicates = count(&server.db, "SELECT count(*) FROM (SELECT call_id, count(*) FROM effects GROUP BY call_id HAVING count(*) > 1)");
    assert_eq!(duplicates, 0);
    assert_eq!(server.stats()["calls"], 5);
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
}

/// Column `index` (text) of every row `sql` returns.
fn text_column(conn: &rusqlite::Connection, sql: &str, index: usize) -> Vec<String> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| r.get(index))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A database created with the seed's exact DDL (section 12.3: the full client
/// index, `AUTOINCREMENT` audit ids) is used as it is: calls run, and audit ids
/// keep coming from `sqlite_sequence`.
#[test]
fn database_with_the_seeds_exact_schema_still_works() {
    let db = TempDb::new("seed-schema");
    open_db(&db.path)
        .execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE calls (
               call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL,
               client_id TEXT, seq INTEGER, tool TEXT NOT NULL, args_json TEXT NOT NULL,
               status TEXT NOT NULL, result_json TEXT, error_json TEXT,
               attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
               created_at REAL NOT NULL, updated_at REAL NOT NULL);
             CREATE INDEX idx_calls_status ON calls(status, lease_until);
             CREATE INDEX idx_calls_client_seq ON calls(client_id, seq);
             CREATE TABLE effects (
               effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, tool TEXT NOT NULL,
               amount INTEGER, created_at REAL NOT NULL);
             CREATE TABLE audit (
               id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, call_id TEXT,
               event TEXT NOT NULL, detail TEXT);",
        )
        .unwrap();
    let server = Local::start(&db, &[]);
    let (status, created) = server.post("seed-1", &charge(7));
    assert_eq!(status, 202, "{created}");
    let call_id = created["call_id"].as_str().unwrap();
    assert_eq!(server.wait_terminal(call_id)["status"], "succeeded");
    assert_eq!(
        audit_events(&db.path, call_id),
        ["created", "claimed", "succeeded"]
    );
    assert_eq!(db.effects(), 1);
    assert_eq!(
        db.count("SELECT seq FROM sqlite_sequence WHERE name = 'audit'"),
        3
    );
    // Migration 5 rebuilt `calls` (keys per tenant), migration 9 made its
    // count tables from the rows there and reshaped its status index.
    let stats = server.stats();
    assert_eq!(stats["calls"], 1, "{stats}");
    assert_eq!(stats["by_status"], json!({"succeeded": 1}), "{stats}");
    assert_eq!(stats["attempts"], json!({"1": 1}), "{stats}");
}

/// A database locked past the busy timeout answers 503 with Retry-After (and
/// MCP the same code and retry hint) and changes nothing; the same-key retry
/// succeeds once the lock is gone.
#[test]
fn locked_database_answers_503_and_retry_succeeds() {
    let db = TempDb::new("locked");
    let server = Local::start(&db, &["--busy-timeout-ms", "200"]);
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let resp = idempotent_tool::client::request_once(
        &server.base,
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "k-locked")],
        Some(charge(9).to_string().as_bytes()),
        Some(support::DEADLINE),
    )
    .unwrap();
    assert_eq!(resp.status, 503, "{:?}", resp.json());
    assert_eq!(resp.json()["error"]["code"], "unavailable");
    assert!(resp.header("retry-after").is_some());
    // MCP is told the same: its code and when to come back, in `data`.
    let mcp_body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "charge", "arguments": {"amount": 9},
                   "_meta": {"dev.idempotent-tool/idempotency-key": "k-locked-mcp"}},
    });
    let mcp = idempotent_tool::client::request_once(
        &server.base,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        Some(mcp_body.to_string().as_bytes()),
        Some(support::DEADLINE),
    )
    .unwrap()
    .json();
    assert_eq!(mcp["error"]["data"]["code"], "unavailable", "{mcp}");
    assert_eq!(mcp["error"]["data"]["retry_after_secs"], 1, "{mcp}");
    assert_eq!(mcp["error"]["message"], resp.json()["error"]["message"]);
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        server.by_key("k-locked").0,
        404,
        "the refused request left nothing behind"
    );
    let (status, call) = server.post("k-locked", &charge(9));
    assert_eq!(status, 202, "{call}");
    assert_eq!(
        server.wait_terminal(call["call_id"].as_str().unwrap())["status"],
        "succeeded"
    );
}

/// A retry of a call in progress is answered from a read connection: it gets
/// its call back even while another connection holds the write lock, when a new
/// key (which must go through the writer) is refused with 503.
#[test]
fn retry_of_a_call_in_progress_does_not_need_the_writer() {
    let db = TempDb::new("inflight-retry");
    let server = Local::start(&db, &["--busy-timeout-ms", "200"]);
    let slow = json!({"tool": "sleep", "args": {"seconds": 5}});
    let (status, first) = server.post("k-inflight", &slow);
    assert_eq!(status, 202, "{first}");
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (status, retry) = server.post("k-inflight", &slow);
    let (new_status, new_key) = server.post("k-new-while-locked", &charge(1));
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(status, 202, "{retry}");
    assert_eq!(retry["call_id"], first["call_id"]);
    assert_eq!(new_status, 503, "{new_key}");
    assert_eq!(new_key["error"]["code"], "unavailable");
}

/// The call `done` finished once, on its first attempt: `succeeded`, audited
/// `created`, `claimed`, `succeeded` and nothing else.
fn assert_finished_once_on_attempt_1(db: &TempDb, call_id: &str, done: &serde_json::Value) {
    assert_eq!(
        support::status_and_attempt(done),
        (Some("succeeded"), Some(1)),
        "{done}"
    );
    assert_eq!(
        audit_events(&db.path, call_id),
        ["created", "claimed", "succeeded"]
    );
}

/// Another connection holds the write lock for a second past a whole lease
/// while a `sleep` runs, with `busy_timeout_ms` for the service's own writes;
/// then the call must finish once, on attempt 1, never recovered.
fn stall_the_writer_past_the_lease(name: &str, busy_timeout_ms: &str) {
    let db = TempDb::new(name);
    let flags = support::one_second_lease_flags(busy_timeout_ms);
    let server = Local::start(&db, &flags);
    // Still running when the stall ends, with a second to spare: this test is
    // about the lease; a completion the stall refuses is the next test's.
    let sleep = json!({"tool": "sleep", "args": {"seconds": 4}});
    let (status, call) = server.post("k-stalled", &sleep);
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let blocker = support::hold_the_write_lock_past_the_lease(&db.path, &call_id);
    blocker.execute_batch("ROLLBACK").unwrap();
    // With a 20 ms busy timeout a read may be answered 503 while the writer
    // catches up; a client asks again, and so does this loop.
    let mut done = serde_json::Value::Null;
    support::eventually("the call to finish", || {
        let (status, call) = server.get(&format!("/v1/tool-calls/{call_id}"));
        let finished =
            status == 200 && matches!(call["status"].as_str(), Some("succeeded" | "failed"));
        if finished {
            done = call;
        }
        finished
    });
    assert_finished_once_on_attempt_1(&db, &call_id, &done);
}

/// The service's writes wait out the stall (a busy timeout longer than it):
/// the lease's extension, queued before the lease lapsed, commits first and
/// takes its expiry when it commits. The call keeps its attempt and finishes
/// once.
#[test]
fn a_writer_stalled_past_the_lease_keeps_its_running_call() {
    stall_the_writer_past_the_lease("stalled-writer", "30000");
}

/// The service's writes give up again and again during the stall (a busy
/// timeout far shorter than it): extensions, heartbeats and recovery passes
/// all fail, and whichever comes first once the lock is free must still not
/// take the call from its live worker. Recovery leaves alone the leases this
/// process's workers still hold and extend, so the call keeps its attempt.
#[test]
fn a_writer_failing_past_the_lease_keeps_its_running_call() {
    stall_the_writer_past_the_lease("failing-writer", "20");
}

/// A completion the locked file refuses (a busy timeout of 20 ms, the lock
/// held from outside from before the tool returns until the completion has
/// been refused twice) is handed to the store again once the lock is free:
/// the call finishes on attempt 1, its tool run once. Left to recovery, as
/// before, it would have waited for its lease to lapse and run again.
#[test]
fn a_completion_refused_by_a_locked_file_is_committed_later_not_run_again() {
    let db = TempDb::new("held-completion");
    let flags = ["--lease-secs", "5", "--busy-timeout-ms", "20"];
    let server = Local::start(&db, &flags);
    let sleep = json!({"tool": "sleep", "args": {"seconds": 1}});
    let (status, call) = server.post("k-held", &sleep);
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    assert_eq!(call["status"], "running", "created claimed: {call}");
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    support::eventually("the completion to be refused twice", || {
        server.counter("idempotent_tool_completions_retried_total") >= 2.0
    });
    blocker.execute_batch("ROLLBACK").unwrap();
    let done = server.wait_terminal(&call_id);
    assert_finished_once_on_attempt_1(&db, &call_id, &done);
}

/// The same refusal lasting a second past the call's lease, with recovery
/// every 50 ms: this process's recovery leaves the held completion's lapsed
/// lease alone (its executor is alive), so once the lock is free the
/// completion commits and the call still finishes on attempt 1.
#[test]
fn a_completion_refused_past_its_lease_is_committed_later_not_run_again() {
    let db = TempDb::new("held-past-lease");
    let server = Local::start(&db, &support::one_second_lease_flags("20"));
    let sleep = json!({"tool": "sleep", "args": {"seconds": 0.5}});
    let (status, call) = server.post("k-held-long", &sleep);
    assert_eq!(status, 202, "{call}");
    assert_eq!(call["status"], "running", "created claimed: {call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let blocker = support::hold_the_write_lock_past_the_lease(&db.path, &call_id);
    assert!(
        server.counter("idempotent_tool_completions_retried_total") >= 2.0,
        "the tool returned during the stall and its completion was refused"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    let done = server.wait_terminal(&call_id);
    assert_finished_once_on_attempt_1(&db, &call_id, &done);
}

/// What `EXPLAIN QUERY PLAN` says of `sql`, each step's detail, its
/// parameters bound to NULL (the plan does not depend on their values).
fn plan_of(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
    stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}
