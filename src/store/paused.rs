//! Paused tools, as both backends keep them: a row of `paused_tools` per
//! paused tool (who paused it, when, why), which every claim statement of
//! both wings consults — a claim never takes a call of a paused tool, nor a
//! create makes one already claimed — so a pause holds for every process on
//! the file and every node on the database from the moment it commits,
//! whatever each process has yet heard of it. A paused tool's calls are
//! still accepted and recorded: they wait `pending`, and once the row is
//! gone (resume) they are claimed as any due call, oldest first.
//!
//! The cost on a claim is one probe of this small table's primary key (an
//! empty one, almost always). This file holds the row's type; the wings'
//! `paused.rs` hold the SQL.

use serde_json::{json, Value};

/// One paused tool.
#[derive(Debug, Clone, PartialEq)]
pub struct PausedTool {
    pub tool: String,
    /// Wall-clock seconds (the database's, on PostgreSQL).
    pub paused_at: f64,
    /// Who paused it (a tenant's name).
    pub paused_by: String,
    pub reason: Option<String>,
}

impl PausedTool {
    pub fn to_json(&self) -> Value {
        json!({
            "paused_at": self.paused_at,
            "paused_by": self.paused_by,
            "reason": self.reason,
        })
    }
}

/// What a pause or a resume did.
#[derive(Debug, Clone, PartialEq)]
pub enum Toggled {
    /// This request paused it (or resumed it).
    Now(Option<PausedTool>),
    /// It already was: nothing changed.
    Already(Option<PausedTool>),
}
