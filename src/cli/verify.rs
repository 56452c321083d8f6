//! `idempotent-tool verify --db FILE|URL [--db-schema NAME] [--tools FILE]`: every invariant
//! checked read-only on a database (`store::verify`), the report on stdout,
//! its verdict in the exit status.

use super::failure::{Failure, VERIFY};
use crate::flag::{FlagError, Flags};
use crate::store::verify::{tools_outside_database, verify_database};
use crate::store::{Database, DbSchema, DB_SCHEMA_RULE};
use crate::tools::{file::effect_tools, EFFECT_TOOLS, TOOL_NAMES};
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: idempotent-tool verify --db FILE|URL [--db-schema NAME] [--tools FILE]

Checks every invariant on a database file, read-only (safe beside a running
server): one call per key (per tenant when tenants exist), at most one effect
per call, every effect its succeeded call's and every succeeded call of a tool
that writes effects its effect, no running call without a lease, no unknown
status, PRAGMA integrity_check. Prints counts and one line per invariant.

--db-schema NAME: on PostgreSQL, the schema the service keeps its tables in,
as the service was given it (default idempotent_tool).

Which tools write effects: charge and send_email; with --tools, the tools
file the server ran with decides (every http and command tool, and charge and
send_email if listed). Only names and kinds are read from it: its ${NAME}
variables need not be set.

Without --tools, a database with calls of tools that are not built in is
not judged: verify names those tools and asks for --tools (exit 2).

Exit status: 0 every invariant holds, 1 a violation (each one named),
2 bad usage, a tools file it cannot read, or tools it needs --tools for,
3 the database could not be read as a service database.
";

/// `verify --db FILE`: the report on stdout, its verdict in the exit status.
pub fn run(args: &[String]) -> Result<(), Failure> {
    let flags = verify_flags(args).map_err(|error| Failure::Usage {
        command: VERIFY,
        error: Box::new(error),
    })?;
    let Some((db, tools)) = flags else {
        crate::out!("{USAGE}");
        return Ok(());
    };
    let effect_writers = effect_writers(&db, tools, VERIFY)?;
    let effect_writers: Vec<&str> = effect_writers.iter().map(String::as_str).collect();
    let report = verify_database(&db, &effect_writers).map_err(Failure::Unverifiable)?;
    crate::out!("{report}");
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure::Violations)
    }
}

/// The tools whose every success writes one effect: from the tools file the
/// server ran with, else the built-ins (when the database names no others).
pub(super) fn effect_writers(
    db: &Database,
    tools: Option<PathBuf>,
    command: &'static str,
) -> Result<Vec<String>, Failure> {
    match tools {
        Some(file) => effect_tools(&file).map_err(|error| Failure::ToolsFile { command, error }),
        None => {
            let unknown = tools_outside_database(db, &TOOL_NAMES).map_err(Failure::Unverifiable)?;
            if !unknown.is_empty() {
                return Err(Failure::NeedsToolsFile(unknown));
            }
            Ok(EFFECT_TOOLS.iter().map(|t| t.to_string()).collect())
        }
    }
}

/// `--db FILE`, required, `--db-schema NAME` and `--tools FILE`; `Ok(None)`
/// for `--help`.
fn verify_flags(args: &[String]) -> Result<Option<(Database, Option<PathBuf>)>, FlagError> {
    let mut flags = Flags::new(args.iter().cloned());
    let (mut db, mut tools, mut schema) = (None, None, DbSchema::default());
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--db" => {
                db = Some(
                    Database::parse(&flags.value()?)
                        .map_err(|e| FlagError::Other(e.to_string()))?,
                )
            }
            "--tools" => tools = Some(PathBuf::from(flags.value()?)),
            "--db-schema" => {
                let value = flags.value()?;
                schema = DbSchema::parse(&value).ok_or(FlagError::BadValue {
                    flag: "--db-schema".into(),
                    value,
                    expected: DB_SCHEMA_RULE,
                })?
            }
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    let mut db: Database = db.ok_or(FlagError::Missing("--db FILE|URL"))?;
    db.set_schema(&schema);
    Ok(Some((db, tools)))
}
