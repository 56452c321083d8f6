//! One test body, two backends: `on_both_backends!(name, ...)` turns each
//! `fn name(db: &TestDb) -> Result<(), StoreError>` into two tests,
//! `name::sqlite` (a temp file) and `name::postgres` (a fresh database on
//! the test process's private PostgreSQL, `temp::postgres`). Where
//! PostgreSQL is not installed the `postgres` tests fail with one line
//! saying what to install.

use super::super::{CallStore, Database, StoreError, StoreOptions};
use crate::temp::postgres::PgServer;
use crate::temp::TempDb;
use std::sync::Arc;

/// A test's database, on one backend.
pub(in crate::store) enum TestDb {
    Sqlite(TempDb),
    Postgres(String),
}

impl TestDb {
    pub(in crate::store) fn sqlite(name: &str) -> TestDb {
        TestDb::Sqlite(TempDb::new(&format!("idem-store-{name}")))
    }

    pub(in crate::store) fn postgres(name: &str) -> TestDb {
        TestDb::Postgres(PgServer::shared().fresh_database(name))
    }

    pub(in crate::store) fn database(&self) -> Database {
        match self {
            TestDb::Sqlite(dir) => Database::Sqlite(dir.path().to_path_buf()),
            TestDb::Postgres(url) => Database::parse(url).unwrap(),
        }
    }

    pub(in crate::store) fn open(&self) -> Result<Arc<CallStore>, StoreError> {
        self.open_with(StoreOptions::default())
    }

    pub(in crate::store) fn open_with(
        &self,
        options: StoreOptions,
    ) -> Result<Arc<CallStore>, StoreError> {
        CallStore::open(&self.database(), options)
    }

    /// A statement the store itself would never run (a test's setup),
    /// written in SQL both backends read alike.
    pub(in crate::store) fn execute(&self, sql: &str) {
        match self {
            TestDb::Sqlite(dir) => {
                rusqlite::Connection::open(dir.path())
                    .unwrap()
                    .execute_batch(sql)
                    .unwrap();
            }
            TestDb::Postgres(url) => {
                crate::temp::postgres::connect(url)
                    .batch_execute(sql)
                    .unwrap();
            }
        }
    }

    /// The one real number, or none, `sql` selects (a `min(created_at)`).
    pub(in crate::store) fn real(&self, sql: &str) -> Option<f64> {
        match self {
            TestDb::Sqlite(dir) => rusqlite::Connection::open(dir.path())
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            TestDb::Postgres(url) => crate::temp::postgres::connect(url)
                .query_one(sql, &[])
                .unwrap()
                .get(0),
        }
    }

    /// The first column of every row `sql` selects, as text.
    pub(in crate::store) fn texts(&self, sql: &str) -> Vec<String> {
        match self {
            TestDb::Sqlite(dir) => rusqlite::Connection::open(dir.path())
                .unwrap()
                .prepare(sql)
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap(),
            TestDb::Postgres(url) => crate::temp::postgres::connect(url)
                .query(sql, &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    /// The one number `sql` (a `count(*)`) selects.
    pub(in crate::store) fn count(&self, sql: &str) -> i64 {
        match self {
            TestDb::Sqlite(dir) => rusqlite::Connection::open(dir.path())
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            TestDb::Postgres(url) => crate::temp::postgres::connect(url)
                .query_one(sql, &[])
                .unwrap()
                .get(0),
        }
    }
}

/// Emit `name::sqlite` and `name::postgres` for each contract test `name`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use crate::store::tests::backends::TestDb;
                use crate::store::StoreError;

                #[test]
                fn sqlite() -> Result<(), StoreError> {
                    super::$name(&TestDb::sqlite(stringify!($name)))
                }

                #[test]
                fn postgres() -> Result<(), StoreError> {
                    super::$name(&TestDb::postgres(stringify!($name)))
                }
            }
        )*
    };
}
pub(in crate::store) use on_both_backends;
