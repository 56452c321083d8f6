//! `--db-schema` on PostgreSQL: two deployments share one database under
//! two schemas with independent keys; an earlier release's tables in
//! `public` move into the schema in place at start (and not while one of
//! its nodes still runs); a role that owns only its schema runs the service
//! and `verify`. Real binaries on databases of the test PostgreSQL.

use crate::support::{charge, signal, Http, Server, DEADLINE, SERVER_BIN};
use idempotent_tool::temp::postgres::{connect, PgServer};
use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::process::Command;

fn start(url: &str, extra: &[&str], scratch: &TempDir) -> Server {
    Server::start_on_postgres(url, extra, scratch)
}

fn count(url: &str, sql: &str) -> i64 {
    connect(url)
        .query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// `idempotent-tool verify` on `url` with `extra` flags: its exit code and stdout.
fn verify(url: &str, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(SERVER_BIN)
        .args(["verify", "--db", url])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// A charge under `key`, settled.
fn charged(server: &Server, key: &str, amount: i64) -> Value {
    let (status, call) = server.post(key, &charge(amount));
    assert!(matches!(status, 200..=202), "{call}");
    server.wait_terminal(call["call_id"].as_str().unwrap())
}

/// Two services on one database, `--db-schema team_a` and `team_b`: the same
/// key with different requests is a new call in each (no `409`), each
/// schema holds its own tables and calls, `public` holds none, and `verify`
/// judges each schema by its flag.
#[test]
fn two_schemas_on_one_database_keep_their_keys_apart() {
    let url = PgServer::shared().fresh_database("schema_two");
    let scratch = TempDir::new("idem-pg-schema").unwrap();
    let a = start(&url, &["--db-schema", "team_a"], &scratch);
    let b = start(&url, &["--db-schema", "team_b"], &scratch);
    let in_a = charged(&a, "same-key", 5);
    let in_b = charged(&b, "same-key", 7);
    assert_eq!(
        (in_a["status"].as_str(), in_b["status"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    assert_ne!(in_a["call_id"], in_b["call_id"]);
    assert_eq!(charged(&a, "only-a", 1)["status"], "succeeded");
    assert_eq!(b.by_key("only-a").0, 404, "a's key is unknown to b");
    assert_eq!(count(&url, "SELECT count(*) FROM team_a.calls"), 2);
    assert_eq!(count(&url, "SELECT count(*) FROM team_b.calls"), 1);
    assert_eq!(
        count(&url, "SELECT count(*) FROM team_b.effects WHERE amount = 7"),
        1
    );
    let in_public = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'";
    assert_eq!(count(&url, in_public), 0, "nothing in public");
    for (schema, calls) in [("team_a", "2"), ("team_b", "1")] {
        let (code, report) = verify(&url, &["--db-schema", schema]);
        assert_eq!(code, Some(0), "{report}");
        let counted = report
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["calls", calls]));
        assert!(counted, "{schema}: {report}");
    }
}

/// An earlier release's layout — the tables in `public`, at its schema
/// version — is moved into the default schema at the next start, with its
/// calls: their keys answer as before, later steps apply in the new schema,
/// and `public` is left empty. While a node of the earlier layout still
/// heart-beats, the move is refused (exit 1, naming the way out).
#[test]
fn an_earlier_release_tables_in_public_move_into_the_schema_at_start() {
    let url = PgServer::shared().fresh_database("schema_move");
    let scratch = TempDir::new("idem-pg-schema").unwrap();
    let mut old = start(&url, &["--db-schema", "public"], &scratch);
    let before = charged(&old, "kept-key", 3);
    let mut db = connect(&url);
    // What a release before `--db-schema` left: its steps only, 1 to 3 (the
    // one that came with `--db-schema` makes `tool_limits`; the next, the
    // count tables and the list's index; step 6, approvals and their outbox;
    // step 7, the progress column; the later ones, the error index and counts,
    // the readings, the paused tools and the bulk jobs).
    db.batch_execute(
        "DELETE FROM public.idem_schema WHERE version >= 4;
         DROP TRIGGER calls_failures_counted ON public.calls;
         DROP TRIGGER calls_failures_counted_on_update ON public.calls;
         DROP FUNCTION public.idem_count_failures();
         DROP TABLE public.error_counts, public.rate_readings, public.paused_tools,
                    public.bulk_jobs;
         DROP INDEX public.calls_error;
         DROP TRIGGER calls_error_code ON public.calls;
         DROP TRIGGER calls_error_code_on_update ON public.calls;
         DROP FUNCTION public.idem_error_code();
         ALTER TABLE public.calls DROP COLUMN error_code;
         DROP TABLE public.approvals, public.notifications;
         ALTER TABLE public.calls DROP COLUMN progress_json;
         DROP TABLE public.tool_limits;
         DROP TRIGGER calls_counted ON public.calls;
         DROP TRIGGER calls_counted_on_update ON public.calls;
         DROP TRIGGER effects_counted ON public.effects;
         DROP FUNCTION public.idem_count_calls(), public.idem_count_effects();
         DROP TABLE public.call_counts, public.effect_counts;
         DROP INDEX public.calls_list;",
    )
    .unwrap();

    let refused = Command::new(SERVER_BIN)
        .args(["--port", "0", "--db", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("still run") && stderr.contains("--db-schema public"),
        "{stderr}"
    );
    assert_eq!(
        count(&url, "SELECT count(*) FROM public.calls"),
        1,
        "nothing moved"
    );

    signal(&old.proc.child, "TERM");
    assert!(old.proc.wait_exit(DEADLINE), "the old node stopped");
    let new = start(&url, &[], &scratch);
    let (status, found) = new.by_key("kept-key");
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["call_id"], before["call_id"]);
    assert_eq!(found["effect_id"], before["effect_id"]);
    assert_eq!(charged(&new, "new-key", 4)["status"], "succeeded");
    assert_eq!(count(&url, "SELECT count(*) FROM idempotent_tool.calls"), 2);
    let in_public = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'";
    assert_eq!(count(&url, in_public), 0, "every table moved");
    let version = "SELECT max(version)::int8 FROM idempotent_tool.idem_schema";
    let latest = i64::from(idempotent_tool::store::PG_SCHEMA_VERSION);
    assert_eq!(
        count(&url, version),
        latest,
        "later steps applied in the new schema"
    );
    assert!(new.stderr().contains("tables_moved"), "{}", new.stderr());
    let (code, report) = verify(&url, &[]);
    assert_eq!(code, Some(0), "{report}");
}

/// The grants of docs/postgres.md: a role that may only connect to the
/// database and owns its schema (made for it by an administrator) runs the
/// service, migrations included, and `verify`; it cannot make another
/// schema, so `--db-schema` naming one it was not given stops the start.
#[test]
fn a_role_that_owns_only_its_schema_runs_the_service() {
    let pg = PgServer::shared();
    let admin_url = pg.fresh_database("schema_role");
    let dbname = admin_url.rsplit('/').next().unwrap().to_string();
    let role = format!("{dbname}_app");
    let mut admin = connect(&admin_url);
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'role-pw';
             REVOKE ALL ON DATABASE {dbname} FROM PUBLIC;
             GRANT CONNECT ON DATABASE {dbname} TO {role};
             CREATE SCHEMA idempotent_tool AUTHORIZATION {role};"
        ))
        .unwrap();
    let url = format!("postgres://{role}:role-pw@127.0.0.1:{}/{dbname}", pg.port());
    let scratch = TempDir::new("idem-pg-schema").unwrap();
    let server = start(&url, &[], &scratch);
    assert_eq!(charged(&server, "least", 2)["status"], "succeeded");
    let (code, report) = verify(&url, &[]);
    assert_eq!(code, Some(0), "{report}");

    let other = Command::new(SERVER_BIN)
        .args(["--port", "0", "--db", &url, "--db-schema", "not_given"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
}
