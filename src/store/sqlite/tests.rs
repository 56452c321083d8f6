//! The SQLite wing's own tests: the writer thread and the migrations, which
//! PostgreSQL does not have. They share the store tests' helpers.

use super::schema;
use crate::store::tests::{audit_events, new_call, rows};
use crate::store::*;
use crate::temp::TempDb;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod migrations;
mod writer;
