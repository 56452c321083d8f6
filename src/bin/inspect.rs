//! The `inspect` binary: print the seed's inspection queries (section 12.11.1)
//! against a service database, pipe-separated like the `sqlite3` CLI, for
//! machines that do not have that CLI (the fault-injection script uses it).
//!
//! It opens the file read-only and never writes: it may run while the server
//! is up, and evidence must not change the thing it is evidence of.
//!
//! `--query NAME` prints one query's rows without a heading (for scripts that
//! count lines); `--query by_business_key` reconciles effects by business key
//! (the store's `LEDGER_SQL`); `--sql TEXT` runs any read-only statement.

#![forbid(unsafe_code)]

use idempotent_tool::flag::{FlagError, Flags};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::process::ExitCode;

const USAGE: &str = "\
usage: inspect --db PATH [--query calls|effects|duplicates|audit|by_business_key|all]
               [--sql SELECT...]

  --query by_business_key   effects reconciled by business key (tenant|tool|key|
                            calls|live calls|effects|amount), not by request";

/// The seed's queries, by name, in the order `all` prints them.
const QUERIES: [(&str, &str); 4] = [
    (
        "calls",
        "SELECT call_id,status,attempt,effect_id FROM calls",
    ),
    ("effects", "SELECT call_id,effect_id FROM effects"),
    (
        "duplicates",
        "SELECT call_id,count(*) FROM effects GROUP BY call_id HAVING count(*)>1",
    ),
    (
        "audit",
        "SELECT call_id,event,detail FROM audit ORDER BY id",
    ),
];

/// What to print.
enum Selection {
    /// Every seed query, each under a `-- name: SQL` heading.
    All,
    /// One seed query's rows, no heading.
    Named(&'static str),
    /// A caller's statement, rows only.
    Sql(String),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (db, selection) = match parse_args(&args) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            idempotent_tool::outln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            idempotent_tool::cli::console::usage_error("inspect", &message);
            return ExitCode::from(2);
        }
    };
    match run(&db, &selection) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            idempotent_tool::errln!("inspect: {db}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(db: &str, selection: &Selection) -> rusqlite::Result<()> {
    // Read-only, and no creating: a wrong path must fail, not make an empty db.
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    // The server may hold the write lock for a moment; wait instead of failing.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    match selection {
        Selection::All => {
            for (name, sql) in QUERIES {
                idempotent_tool::outln!("-- {name}: {sql}");
                print_rows(&conn, sql)?;
            }
            Ok(())
        }
        Selection::Named(sql) => print_rows(&conn, sql),
        Selection::Sql(sql) => print_rows(&conn, sql),
    }
}

/// Print each row as `a|b|c`, NULL as empty: the `sqlite3` CLI's default list mode.
fn print_rows(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    let mut statement = conn.prepare(sql)?;
    let columns = statement.column_count();
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let fields: Vec<String> = (0..columns)
            .map(|i| row.get_ref(i).map(render))
            .collect::<rusqlite::Result<_>>()?;
        idempotent_tool::outln!("{}", fields.join("|"));
    }
    Ok(())
}

fn render(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// The database and what to print from it; `Ok(None)` means `--help`.
fn parse_args(args: &[String]) -> Result<Option<(String, Selection)>, FlagError> {
    let mut db = None;
    let mut selection = Selection::All;
    let mut flags = Flags::new(args.iter().cloned());
    while let Some(flag) = flags.next_flag()? {
        let mut value = || flags.value();
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--db" => db = Some(value()?),
            "--sql" => selection = Selection::Sql(value()?),
            "--query" => selection = named_query(&value()?)?,
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    Ok(Some((
        db.ok_or(FlagError::Missing("--db PATH"))?,
        selection,
    )))
}

/// `--query NAME`: one seed query's rows, or `all` of them with headings.
fn named_query(name: &str) -> Result<Selection, FlagError> {
    if name == "all" {
        return Ok(Selection::All);
    }
    if name == "by_business_key" {
        return Ok(Selection::Named(idempotent_tool::store::LEDGER_SQL));
    }
    let (_, sql) = QUERIES
        .iter()
        .find(|(query, _)| *query == name)
        .ok_or_else(|| FlagError::BadValue {
            flag: "--query".into(),
            value: name.to_string(),
            expected: "a query named in --help, or all",
        })?;
    Ok(Selection::Named(sql))
}
