//! Migrations: databases made by the chapter's DDL and by the last release
//! before migrations upgrade in place with every row kept; a database from a
//! newer release is refused. SQLite only (PostgreSQL's schema starts at the
//! current version).

use super::*;
use rusqlite::Connection;

/// Migration 9 fills the count tables from the rows already there: `/stats`
/// then answers what counting `calls` and `effects` answers, an effect whose
/// call is gone counting for every tenant together but for no one tenant.
#[test]
fn the_count_tables_start_from_the_rows_already_there() -> Result<(), StoreError> {
    let db = TempDb::new("counts-backfill");
    Connection::open(db.path())?
        .execute_batch(&format!("{RELEASE_0_DDL}{OLD_ROWS}{MORE_OLD_ROWS}"))?;
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let all = store.stats(Scope::All)?;
    assert_eq!(all.calls, 3);
    assert_eq!(all.effects, 2);
    let by_status: Vec<(&str, i64)> = all
        .by_status
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    assert_eq!(by_status, [("failed", 1), ("pending", 1), ("succeeded", 1)]);
    assert_eq!(all.attempts, [(0, 1), (1, 1), (2, 1)]);
    let tenant = store.stats(Scope::Tenant(crate::auth::ANONYMOUS))?;
    assert_eq!((tenant.calls, tenant.effects), (3, 1));
    let backlog = store.backlog()?;
    assert_eq!(backlog.oldest_pending_created_at, Some(3.0));
    Ok(())
}

/// Beside `OLD_ROWS`: a failed call on its second attempt, a pending one,
/// and an effect whose call was purged.
const MORE_OLD_ROWS: &str = "
INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt, created_at,
                   updated_at)
     VALUES ('c_0000000000000002', 'failed-key', 'fp', 'fail', '{}', 'failed', 2, 2.0, 2.0),
            ('c_0000000000000003', 'pending-key', 'fp', 'charge', '{}', 'pending', 0, 3.0, 3.0);
INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
     VALUES ('eff_00000000000000ff', 'c_00000000000000ff', 'charge', 1, 1.0);
";

/// Section 12.3's DDL, exactly as the chapter prints it.
const CHAPTER_DDL: &str = "
CREATE TABLE calls (
  call_id      TEXT PRIMARY KEY,
  idem_key     TEXT NOT NULL UNIQUE,
  fingerprint  TEXT NOT NULL,
  client_id    TEXT,
  seq          INTEGER,
  tool         TEXT NOT NULL,
  args_json    TEXT NOT NULL,
  status       TEXT NOT NULL,
  result_json  TEXT,
  error_json   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  lease_until  REAL,
  owner        TEXT,
  effect_id    TEXT,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL
);
CREATE INDEX idx_calls_status ON calls(status, lease_until);
CREATE INDEX idx_calls_client_seq ON calls(client_id, seq);

CREATE TABLE effects (
  effect_id   TEXT PRIMARY KEY,
  call_id     TEXT NOT NULL UNIQUE,
  tool        TEXT NOT NULL,
  amount      INTEGER,
  created_at  REAL NOT NULL
);

CREATE TABLE audit (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  ts       REAL NOT NULL,
  call_id  TEXT,
  event    TEXT NOT NULL,
  detail   TEXT
);
";

/// The DDL of the last release before migrations (user_version 0).
const RELEASE_0_DDL: &str = "
CREATE TABLE IF NOT EXISTS calls (
  call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL,
  client_id TEXT, seq INTEGER, tool TEXT NOT NULL, args_json TEXT NOT NULL,
  status TEXT NOT NULL, result_json TEXT, error_json TEXT,
  attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_calls_status ON calls(status, lease_until, attempt);
CREATE INDEX IF NOT EXISTS idx_calls_client_seq ON calls(client_id, seq) WHERE client_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS effects (
  effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, tool TEXT NOT NULL,
  amount INTEGER, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, call_id TEXT, event TEXT NOT NULL, detail TEXT
);
";

/// One succeeded charge with its effect and audit row, as an old release wrote them.
const OLD_ROWS: &str = "
INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, result_json,
                   attempt, effect_id, created_at, updated_at)
     VALUES ('c_0000000000000001', 'old-key', 'fp', 'charge', '{\"amount\":5}', 'succeeded',
             '{\"charged\":5}', 1, 'eff_0000000000000001', 1.0, 2.0);
INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
     VALUES ('eff_0000000000000001', 'c_0000000000000001', 'charge', 5, 2.0);
INSERT INTO audit (ts, call_id, event, detail) VALUES (2.0, 'c_0000000000000001', 'succeeded', 'x');
";

fn user_version(db: &Path) -> i64 {
    rows(db, "SELECT user_version FROM pragma_user_version")
}

/// Open a database made by `ddl` holding `OLD_ROWS`, and check that its rows
/// are intact and its schema is this release's.
fn upgrades_in_place(name: &str, ddl: &str) -> Result<(), StoreError> {
    let db = TempDb::new(name);
    Connection::open(db.path())?.execute_batch(&format!("{ddl}{OLD_ROWS}"))?;
    assert_eq!(user_version(db.path()), 0);
    let rowid_before = rows(db.path(), "SELECT rowid FROM calls");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    // Migration 5 rebuilt `calls`: every row kept, with its rowid, in the
    // anonymous tenant; keys are now unique per tenant, not globally.
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 1);
    assert_eq!(rows(db.path(), "SELECT rowid FROM calls"), rowid_before);
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM calls WHERE tenant = 'anonymous'"
        ),
        1
    );
    let mut other_tenant = new_call("old-key", "fp");
    other_tenant.tenant = "acme".into();
    assert!(matches!(
        store.create_or_get(other_tenant)?,
        Created::New(_)
    ));
    assert!(matches!(
        store.create_or_get(new_call("old-key", "other-fp"))?,
        Created::Conflict(_)
    ));
    for (table, column) in [("audit", "attempt"), ("effects", "call_purged_at")] {
        let sql =
            format!("SELECT count(*) FROM pragma_table_info('{table}') WHERE name = '{column}'");
        assert_eq!(rows(db.path(), &sql), 1, "{table}.{column}");
    }
    let call = store
        .find_by_key(crate::auth::ANONYMOUS, "old-key")?
        .expect("the old call survives");
    assert_eq!(call.status, Status::Succeeded);
    assert_eq!(call.result, Some(json!({"charged": 5})));
    assert_eq!(store.stats(Scope::All)?.effects, 1);
    assert_eq!(store.stats(Scope::Tenant("acme"))?.calls, 1);
    assert_eq!(user_version(db.path()), SCHEMA_VERSION);
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM sqlite_master WHERE name = 'idx_audit_call'"
        ),
        1
    );
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM pragma_table_info('effects') WHERE name = 'detail'"
        ),
        1
    );
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM pragma_table_info('calls') WHERE name = 'next_attempt_at'"
        ),
        1
    );
    assert_eq!(
        call.next_attempt_at, None,
        "an old row has no retry scheduled"
    );
    assert_eq!(audit_events(&store, &call.call_id), ["succeeded"]);
    // The new code writes into the upgraded file as into a new one.
    let lease_holder = store.create_or_get(new_call("new-key", "fp"))?;
    assert!(matches!(lease_holder, Created::New(_)));
    store.stop();
    // A second start finds nothing to apply.
    let conn = Connection::open(db.path())?;
    assert!(schema::migrate(&conn)?.is_empty());
    Ok(())
}

#[test]
fn a_database_made_by_the_chapters_ddl_upgrades_in_place() -> Result<(), StoreError> {
    upgrades_in_place("chapter-ddl", CHAPTER_DDL)
}

#[test]
fn a_database_made_before_migrations_upgrades_in_place() -> Result<(), StoreError> {
    upgrades_in_place("release-0", RELEASE_0_DDL)
}

#[test]
fn a_database_from_a_newer_release_is_refused() -> Result<(), StoreError> {
    let db = TempDb::new("too-new");
    Connection::open(db.path())?.pragma_update(None, "user_version", SCHEMA_VERSION + 1)?;
    let refused = CallStore::open(db.path(), StoreOptions::default()).err();
    let message = refused.expect("refused").to_string();
    assert!(message.contains("newer than this release"), "{message}");
    Ok(())
}
