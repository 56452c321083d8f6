//! The SQLite wing's own tests: the writer thread (`writer`), the deadline
//! of a wait on the file (`deadline`) and the migrations (`migrations`),
//! which PostgreSQL does not have. They share the store tests' helpers.

use super::{schema, SqliteStore};
use crate::store::tests::{audit_events, new_call, rows};
use crate::store::*;
use crate::temp::TempDb;
use serde_json::json;
use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod deadline;
mod migrations;
mod writer;

/// The SQLite backend behind a store, for the tests that reach into its
/// writer.
trait Sqlite {
    fn sqlite(&self) -> &SqliteStore;
}

impl Sqlite for CallStore {
    fn sqlite(&self) -> &SqliteStore {
        let backend: &dyn Any = self.backend();
        backend
            .downcast_ref()
            .expect("a SQLite test opened a PostgreSQL store")
    }
}
