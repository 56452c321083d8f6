//! A claimed call's stored args as its tool will see them: parsed, the chaos
//! hooks split off, and checked against the tool as this process knows it (a
//! call stored by a process with another tools file may name a tool this one
//! lacks, or args its rules now refuse).
//!
//! It decides nothing: a `StoredArgsError` becomes the call's `bad_args`
//! failure in the runner, its text the error's message.

use crate::chaos::{self, HookError};
use crate::store::Lease;
use crate::tools::{PrepareError, Prepared, ToolRegistry};
use serde_json::{Map, Value};
use std::fmt;

/// Why a claimed call's stored args cannot run.
#[derive(Debug)]
pub(super) enum StoredArgsError {
    /// The stored text is not a JSON object (a database edited by hand).
    Json(serde_json::Error),
    /// A chaos hook is malformed.
    Hook(HookError),
    /// The tool is unknown here, or the args fail its rules.
    Prepare(PrepareError),
}

impl fmt::Display for StoredArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredArgsError::Json(e) => write!(f, "stored args: {e}"),
            StoredArgsError::Hook(e) => e.fmt(f),
            StoredArgsError::Prepare(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StoredArgsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoredArgsError::Json(e) => Some(e),
            StoredArgsError::Hook(e) => Some(e),
            StoredArgsError::Prepare(e) => Some(e),
        }
    }
}

/// The tool prepared for `lease`'s args, the args without hooks, the hooks.
pub(super) fn parse_stored_args(
    tools: &ToolRegistry,
    lease: &Lease,
) -> Result<(Prepared, Map<String, Value>, chaos::Hooks), StoredArgsError> {
    let args: Map<String, Value> =
        serde_json::from_str(&lease.args_json).map_err(StoredArgsError::Json)?;
    let (args, hooks) = chaos::split(&args).map_err(StoredArgsError::Hook)?;
    let prepared = tools
        .prepare(&lease.tool, &args)
        .map_err(StoredArgsError::Prepare)?;
    Ok((prepared, args, hooks))
}
