//! The bench's PostgreSQL comparison (`--db postgres://… --nodes N`), run
//! small: for each mode a SQLite row, a one-node and an N-node PostgreSQL
//! row, every row's invariants held, and the ratios present where they
//! compare something. Figures are read for shape, never for speed.

use crate::support::{Proc, DEADLINE};
use idempotent_tool::temp::postgres::PgServer;
use serde_json::Value;

const BENCH_BIN: &str = env!("CARGO_BIN_EXE_bench");

/// Both modes on SQLite, PostgreSQL with one node and with two, one table.
#[test]
fn postgres_rows_beside_sqlite_hold_their_invariants() {
    let url = PgServer::shared().fresh_database("bench");
    let args = [
        "--db",
        url.as_str(),
        "--nodes",
        "2",
        "--n",
        "40",
        "--concurrency",
        "4",
        "--json",
    ];
    // The report is the one line on stdout, printed last.
    let (mut proc, line) = Proc::start("bench", BENCH_BIN, &args, "\"rows\"");
    assert!(proc.wait_exit(DEADLINE), "the bench did not exit");
    let status = proc.child.try_wait().unwrap().expect("exited");
    assert!(status.success(), "{status:?}\n{line}\n{}", proc.stderr());
    assert!(!line.contains(PgServer::shared().password()), "{line}");
    let report: Value = serde_json::from_str(&line).expect("one JSON line");
    let rows = report["rows"].as_array().expect("rows");
    let shape: Vec<(&str, &str, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["mode"].as_str().unwrap(),
                r["backend"].as_str().unwrap(),
                r["nodes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("distinct", "SQLite", 1),
            ("distinct", "PostgreSQL", 1),
            ("distinct", "PostgreSQL", 2),
            ("same-key", "SQLite", 1),
            ("same-key", "PostgreSQL", 1),
            ("same-key", "PostgreSQL", 2),
        ]
    );
    for row in rows {
        for check in row["checks"].as_array().expect("checks") {
            assert_eq!(check["ok"], true, "{row}");
        }
        assert!(row["completed_per_s"].as_f64().unwrap() > 0.0, "{row}");
        let is_pg = row["backend"] == "PostgreSQL";
        assert_eq!(row["vs_sqlite"].is_number(), is_pg, "{row}");
        assert_eq!(row["vs_one_node"].is_number(), row["nodes"] == 2, "{row}");
    }
}
