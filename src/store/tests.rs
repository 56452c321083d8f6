//! The store's own tests, one file per topic below `tests/`, and the helpers
//! they share (a charge under a key, a completion waited for, the audit
//! events of a call). Contract tests run on both backends through
//! `on_both_backends!` (`tests/backends.rs`); SQLite-only ones (the writer
//! thread, migrations) say so in their file.
//!
//! The topics: `create`, `create_claimed`, `claims`, `claim_due`,
//! `recovery`, `retry`, `cancel`, `approvals`, `limits`, `tenants`, `audit`,
//! `effect_ids`, `counts` (the count tables against counting the rows),
//! `list` (every plan of the list, pages, tenants kept apart), `operator`
//! (re-runs, paused tools, bulk jobs, the list by error code, totals,
//! readings); `backends`
//! (the two backends each test runs on) and `wings` (neither wing names
//! the other).

use super::*;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

mod approvals;
mod audit;
pub(super) mod backends;
mod cancel;
mod claim_due;
mod claims;
mod counts;
mod create;
mod create_claimed;
mod effect_ids;
mod limits;
mod list;
mod operator;
mod recovery;
mod retry;
mod tenants;
mod wings;

use backends::{on_both_backends, TestDb};

/// `succeed_then`, waiting for the commit.
fn succeed(
    store: &CallStore,
    lease: &Lease,
    result: &Value,
    effect: Option<NewEffect>,
) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    store.succeed_then(
        lease,
        result,
        effect,
        Box::new(move |r| tx.send(r).unwrap()),
    );
    rx.recv().unwrap()
}

/// `fail_then`, waiting for the commit.
fn fail(store: &CallStore, lease: &Lease, error: &Value) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    store.fail_then(lease, error, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn charged(amount: i64) -> Option<NewEffect> {
    Some(NewEffect {
        amount: Some(amount),
        detail: None,
    })
}

/// A `charge` of 1 under `tenant`'s `key`.
pub(super) fn new_call_in(tenant: &str, key: &str, fp: &str) -> NewCall {
    NewCall {
        tenant: tenant.into(),
        idem_key: key.into(),
        fingerprint: fp.into(),
        tool: "charge".into(),
        args_json: r#"{"amount":1}"#.into(),
        client_id: None,
        seq: None,
        gate: None,
    }
}

pub(in crate::store) fn new_call(key: &str, fp: &str) -> NewCall {
    new_call_in(crate::auth::ANONYMOUS, key, fp)
}

pub(super) fn created_call(c: Created) -> Call {
    match c {
        Created::New(c) | Created::Existing(c) | Created::RetryReset(c) | Created::Conflict(c) => c,
    }
}

fn effects(store: &CallStore) -> i64 {
    store.stats(Scope::All).unwrap().effects
}

/// A call's audit events, oldest first, through the store (either backend).
pub(in crate::store) fn audit_events(store: &CallStore, call_id: &str) -> Vec<String> {
    let events = store.audit_for(crate::auth::ANONYMOUS, call_id).unwrap();
    events
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// The one number `sql` selects from the SQLite file at `db`.
pub(in crate::store) fn rows(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}
