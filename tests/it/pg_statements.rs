//! Every PostgreSQL statement the store runs is written out whole in
//! `src/store/postgres/`, so that it can be pasted into `psql` as it stands:
//! each string literal of the wing that starts a query (`SELECT`, `INSERT`,
//! `UPDATE`, `DELETE`, `WITH`) is prepared, exactly as written, on a
//! database the store has migrated. The claim statements, each written out
//! with its own copy of the claim, claim with one text. And
//! `bench/pgbench_ceiling.sh` makes its tables from that same source.

use crate::support::openapi::ROOT;
use crate::support::rust_source::{rust_files, scan};
use idempotent_tool::store::{CallStore, Database, StoreOptions};
use idempotent_tool::temp::postgres::{connect, PgServer};
use std::path::Path;
use std::process::Command;

/// How a query starts; anything else in the wing (DDL, `SET`, `LISTEN`) is
/// run by every store that opens.
const QUERIES: [&str; 5] = ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"];

/// The query literals of the PostgreSQL wing, its tests left out, each with
/// the file it is written in.
fn statements() -> Vec<(String, String)> {
    let wing = Path::new(ROOT).join("src/store/postgres");
    let mut out = Vec::new();
    for file in rust_files(&wing) {
        let name = file
            .strip_prefix(ROOT)
            .unwrap_or(&file)
            .display()
            .to_string();
        if name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        for literal in scan(&text).literals {
            let first = literal.split_whitespace().next().unwrap_or("");
            if QUERIES.contains(&first) {
                out.push((name.clone(), literal));
            }
        }
    }
    assert!(out.len() >= 50, "the wing's statements were read: {out:?}");
    out
}

/// A new database of the test PostgreSQL, its schema made by the store.
fn migrated(name: &str) -> String {
    // The store's logs go through the test's capture, like a temp folder's.
    idempotent_tool::log::capture_for_tests();
    let url = PgServer::shared().fresh_database(name);
    let database = Database::parse(&url).expect("a PostgreSQL URL");
    CallStore::open(&database, StoreOptions::default())
        .expect("the store migrates its database")
        .stop();
    url
}

#[test]
fn every_postgres_statement_prepares_as_written() {
    let url = migrated("statements");
    let mut db = connect(&url);
    let mut tx = db.transaction().expect("BEGIN");
    // `home_schema` reads the instances of an earlier release, in `public`.
    tx.batch_execute("CREATE TABLE public.instances (LIKE instances)")
        .expect("an earlier release's table");
    let mut refused = Vec::new();
    for (n, (file, sql)) in statements().iter().enumerate() {
        let mut one = tx.savepoint(format!("s{n}")).expect("SAVEPOINT");
        match one.batch_execute(&format!("PREPARE s{n} AS {sql}")) {
            Ok(()) => one.commit().expect("RELEASE"),
            Err(e) => refused.push(format!("{file}: {e}\n{sql}")),
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n\n"));
}

/// The claim of one statement: from its `u` CTE to the end of the `claimed`
/// audit rows it writes, white space folded.
fn claim_part(sql: &str) -> Option<String> {
    let start = sql.find(", u AS (")?;
    let audited = start + sql[start..].find("'claimed'")?;
    let end = audited + sql[audited..].find("FROM u")? + "FROM u".len();
    Some(
        sql[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// `CLAIM_NAMED`, `CLAIM_DUE` and `CLAIM_LIMITED` each choose calls their
/// own way and then claim them: to `running` under a new attempt, a lease
/// from the database's clock, each audited `claimed`. That part is one
/// text in all three, so a change to it cannot reach only one of them.
#[test]
fn every_claim_statement_claims_with_one_text() {
    let claims: Vec<(String, String)> = statements()
        .into_iter()
        .filter_map(|(file, sql)| claim_part(&sql).map(|claim| (file, claim)))
        .collect();
    assert_eq!(claims.len(), 3, "the three claims: {claims:#?}");
    for (file, claim) in &claims {
        assert_eq!(claim, &claims[0].1, "{file} against {}", claims[0].0);
    }
}

/// The tables, columns and indexes of `schema` (the service's own
/// `idem_schema` left out), indexes without the schema's name.
fn shape(db: &mut postgres::Client, schema: &str) -> Vec<String> {
    const SHAPE: &str =
        "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
           FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'idem_schema'
         UNION ALL
         SELECT replace(indexdef, schemaname || '.', '')
           FROM pg_indexes WHERE schemaname = $1 AND tablename <> 'idem_schema'
         ORDER BY 1";
    let rows = db.query(SHAPE, &[&schema]).expect("the schema's shape");
    rows.iter().map(|row| row.get(0)).collect()
}

/// `bench/pgbench_ceiling.sh` measures PostgreSQL on the backend's own
/// tables: the DDL it reads from `src/store/postgres/` (`--print-ddl`), run
/// in a schema of its own, makes the very tables, columns and indexes the
/// store's migrations make.
#[test]
fn the_pgbench_ceiling_makes_the_backends_tables() {
    let script = format!("{ROOT}/bench/pgbench_ceiling.sh");
    let out = Command::new("bash")
        .args([&script, "--print-ddl"])
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "--print-ddl failed: {stderr}");
    let ddl = String::from_utf8(out.stdout).expect("UTF-8");
    let url = migrated("ceiling_ddl");
    let mut db = connect(&url);
    db.batch_execute(&format!(
        "CREATE SCHEMA ceiling; SET search_path = ceiling; {ddl}"
    ))
    .unwrap_or_else(|e| panic!("the ceiling's DDL: {e}\n{ddl}"));
    let service = shape(&mut db, idempotent_tool::store::DEFAULT_DB_SCHEMA);
    assert!(
        service.len() >= 40,
        "the service's tables were read: {service:?}"
    );
    assert_eq!(shape(&mut db, "ceiling"), service);
}
