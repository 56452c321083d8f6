//! `idempotent-tool verify --db FILE`, run as the real binary: it passes on a
//! database the server wrote (also while the server runs, and after a
//! `kill -9` left a WAL behind, without changing the file), and on a database
//! broken by hand in each way it checks it exits 1 naming that violation and
//! no other; and it reads a copy on a read-only mount, where no `-shm`
//! can be made, without writing.

use crate::support;

use crate::support::tmpfs::Tmpfs;
use crate::support::Counts;
use crate::support::Http;
use crate::support::{open_db, Server, TempDb, SERVER_BIN};
use serde_json::json;
use std::collections::BTreeSet;
use std::process::{Command, Output};

/// The keys `clean_database` posts, one per kind of call.
const CHARGE: &str = "k-charge";
const CHARGE_2: &str = "k-charge-2";
const EMAIL: &str = "k-email";
const SLEEP: &str = "k-sleep";
const FAIL: &str = "k-fail";

fn run_verify(args: &[&str]) -> Output {
    Command::new(SERVER_BIN)
        .arg("verify")
        .args(args)
        .output()
        .expect("run idempotent-tool verify")
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The violation names on the report's last line (`violations N: a, b`).
fn violated(output: &Output) -> BTreeSet<String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    match last.split_once(": ") {
        Some((head, names)) if head.starts_with("violations") && !head.ends_with(" 0") => {
            names.split(", ").map(str::to_string).collect()
        }
        _ => BTreeSet::new(),
    }
}

/// Post one call of each tool and wait for all of them to finish.
fn post_one_of_each(server: &Server) {
    let bodies = [
        (CHARGE, json!({"tool": "charge", "args": {"amount": 100}})),
        (CHARGE_2, json!({"tool": "charge", "args": {"amount": 7}})),
        (EMAIL, json!({"tool": "send_email", "args": {"to": "a@b"}})),
        (SLEEP, json!({"tool": "sleep", "args": {"seconds": 0}})),
        (FAIL, json!({"tool": "fail", "args": {"retryable": false}})),
    ];
    for (key, body) in bodies {
        let (status, call) = server.post(key, &body);
        assert_eq!(status, 202, "{call}");
        server.wait_terminal(call["call_id"].as_str().unwrap());
    }
}

/// A database the real server wrote, with one call of each tool, the server
/// gone and its WAL folded into the main file (so a test may edit its pages).
fn clean_database(prefix: &str) -> TempDb {
    let db = TempDb::new(prefix);
    let mut server = Server::start(&db, &[]);
    post_one_of_each(&server);
    server.kill();
    let conn = open_db(&db.path);
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
        .unwrap();
    db
}

/// Run `sql` on the database, then verify: exit 1, and exactly `expected`
/// violated, each shown with `evidence` somewhere in the report.
fn assert_breaks(db: &TempDb, sql: &str, expected: &[&str], evidence: &str) {
    open_db(&db.path).execute_batch(sql).expect(sql);
    let output = run_verify(&["--db", db.path_str()]);
    let text = describe(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(violated(&output), expected, "{text}");
    for name in &expected {
        assert!(
            text.contains(&format!("× {name}")),
            "{name} not named\n{text}"
        );
    }
    assert!(text.contains(evidence), "{evidence:?} not shown\n{text}");
}

/// The call id of a key, for a test that breaks that call's rows.
fn call_id(db: &TempDb, key: &str) -> String {
    open_db(&db.path)
        .query_row(
            "SELECT call_id FROM calls WHERE idem_key = ?1",
            [key],
            |r| r.get(0),
        )
        .unwrap()
}

fn file_bytes(db: &TempDb, suffix: &str) -> Option<Vec<u8>> {
    std::fs::read(format!("{}{suffix}", db.path_str())).ok()
}

/// Clean: exit 0 with the counts — while the server runs (a call still
/// running under its lease), once it is idle, and after `kill -9` left the
/// commits in the WAL; and verify changes neither the file nor the WAL.
#[test]
fn a_database_the_server_wrote_passes_also_beside_the_running_server() {
    let db = TempDb::new("verify-clean");
    let mut server = Server::start(&db, &[]);
    let (status, slow) = server.post("k-slow", &json!({"tool": "sleep", "args": {"seconds": 2}}));
    assert_eq!(status, 202, "{slow}");
    support::eventually("the slow call to be running", || {
        db.count("SELECT count(*) FROM calls WHERE status = 'running'") == 1
    });
    let beside = run_verify(&["--db", db.path_str()]);
    assert!(beside.status.success(), "{}", describe(&beside));
    assert!(String::from_utf8_lossy(&beside.stdout).contains("running 1"));

    post_one_of_each(&server);
    server.wait_terminal(slow["call_id"].as_str().unwrap());
    let idle = run_verify(&["--db", db.path_str()]);
    let text = describe(&idle);
    assert!(idle.status.success(), "{text}");
    assert!(
        text.contains("calls     6 (failed 1, succeeded 5)"),
        "{text}"
    );
    assert!(text.contains("effects   3"), "{text}");
    assert!(text.contains("violations 0"), "{text}");

    server.kill();
    let (main_before, wal_before) = (file_bytes(&db, ""), file_bytes(&db, "-wal"));
    assert!(
        wal_before.as_ref().is_some_and(|w| !w.is_empty()),
        "kill -9 leaves a WAL"
    );
    let after_kill = run_verify(&["--db", db.path_str()]);
    let text = describe(&after_kill);
    assert!(after_kill.status.success(), "{text}");
    assert!(
        text.contains("calls     6"),
        "the WAL's commits are read: {text}"
    );
    assert_eq!(
        file_bytes(&db, ""),
        main_before,
        "verify wrote the database"
    );
    assert_eq!(file_bytes(&db, "-wal"), wal_before, "verify wrote the WAL");
}

/// Two calls under one key, forged in a copy of `calls` that has no unique index.
/// (`legacy_alter_table`: the count tables' triggers on `effects` name
/// `calls`, which a rename checks them against while it is gone.)
#[test]
fn a_forged_duplicate_key_is_named() {
    let db = clean_database("verify-dup-key");
    assert_breaks(
        &db,
        &format!(
            "PRAGMA legacy_alter_table=ON;
             CREATE TABLE calls_copy AS SELECT * FROM calls;
             DROP TABLE calls;
             ALTER TABLE calls_copy RENAME TO calls;
             INSERT INTO calls SELECT * FROM calls WHERE idem_key = '{SLEEP}';
             UPDATE calls SET call_id = 'c_forged', effect_id = 'eff_forged'
              WHERE rowid = (SELECT max(rowid) FROM calls);"
        ),
        &["duplicate_key"],
        &format!("key '{SLEEP}': 2 calls"),
    );
}

/// A second effect for one call (the duplicate charge the service exists to
/// prevent), forged in a copy of `effects` without its unique indexes.
#[test]
fn a_second_effect_for_a_call_is_named() {
    let db = clean_database("verify-dup-effect");
    let charge = call_id(&db, CHARGE);
    assert_breaks(
        &db,
        &format!(
            "PRAGMA legacy_alter_table=ON;
             CREATE TABLE effects_copy AS SELECT * FROM effects;
             DROP TABLE effects;
             ALTER TABLE effects_copy RENAME TO effects;
             INSERT INTO effects SELECT * FROM effects WHERE call_id = '{charge}';"
        ),
        &["duplicate_effect"],
        &format!("call {charge}: 2 effects"),
    );
}

/// An effect whose call is gone, and one whose call is not `succeeded`.
#[test]
fn an_effect_without_its_succeeded_call_is_named() {
    let db = clean_database("verify-orphan-effect");
    let (charge, charge_2) = (call_id(&db, CHARGE), call_id(&db, CHARGE_2));
    assert_breaks(
        &db,
        &format!(
            "DELETE FROM calls WHERE call_id = '{charge}';
             UPDATE calls SET status = 'failed' WHERE call_id = '{charge_2}';"
        ),
        &["effect_without_succeeded_call"],
        &format!("of call {charge}: no such call"),
    );
    let text = String::from_utf8_lossy(&run_verify(&["--db", db.path_str()]).stdout).into_owned();
    assert!(text.contains("2 × effect_without_succeeded_call"), "{text}");
    assert!(
        text.contains(&format!("of call {charge_2}: the call is 'failed'")),
        "{text}"
    );
}

/// A `succeeded` send_email call whose effect row is missing.
#[test]
fn a_succeeded_call_whose_effect_is_missing_is_named() {
    let db = clean_database("verify-missing-effect");
    let email = call_id(&db, EMAIL);
    assert_breaks(
        &db,
        &format!("DELETE FROM effects WHERE call_id = '{email}'"),
        &["succeeded_without_effect"],
        &format!("call {email} (send_email, key '{EMAIL}') succeeded without an effect"),
    );
}

/// A `running` call with no lease: no worker could be fenced off it.
#[test]
fn a_running_call_without_a_lease_is_named() {
    let db = clean_database("verify-no-lease");
    let sleep = call_id(&db, SLEEP);
    assert_breaks(
        &db,
        &format!(
            "UPDATE calls SET status = 'running', lease_until = NULL, owner = NULL
              WHERE call_id = '{sleep}'"
        ),
        &["running_without_lease"],
        &format!("call {sleep}: running, lease_until NULL"),
    );
}

/// A status outside the state machine.
#[test]
fn an_unknown_status_is_named() {
    let db = clean_database("verify-status");
    let fail = call_id(&db, FAIL);
    assert_breaks(
        &db,
        &format!("UPDATE calls SET status = 'paused' WHERE call_id = '{fail}'"),
        &["unknown_status"],
        &format!("call {fail}: status 'paused'"),
    );
}

/// Cancelled calls — one that never ran, one stopped while it ran — are in
/// the state machine and pass; a cancelled call with an effect row (a
/// cancel that would have hidden an effect) is named.
#[test]
fn cancelled_calls_pass_and_one_with_an_effect_is_named() {
    let db = TempDb::new("verify-cancelled");
    let mut server = Server::start(&db, &["--workers", "1"]);
    let sleep = json!({"tool": "sleep", "args": {"seconds": 10}});
    let (_, running) = server.post("k-running", &sleep);
    let (_, pending) = server.post(
        "k-pending",
        &json!({"tool": "charge", "args": {"amount": 3}}),
    );
    assert_eq!(pending["status"], "pending", "{pending}");
    for call in [&pending, &running] {
        let path = format!(
            "/v1/tool-calls/{}/cancel?wait=30",
            call["call_id"].as_str().unwrap()
        );
        let (status, cancelled) = server.request("POST", &path, &[], None);
        assert_eq!(
            (status, &cancelled["status"]),
            (200, &json!("cancelled")),
            "{cancelled}"
        );
    }
    server.kill();
    support::assert_verify_passes(&db);
    let charge = call_id(&db, "k-pending");
    assert_breaks(
        &db,
        &format!(
            "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
             SELECT effect_id, call_id, tool, 3, created_at FROM calls WHERE call_id = '{charge}'"
        ),
        &["effect_without_succeeded_call"],
        &format!("of call {charge}: the call is 'cancelled'"),
    );
}

/// Bytes overwritten in an index page: only SQLite's own check can see it
/// (the audit index: no other check reads through it).
#[test]
fn a_corrupted_page_is_named_by_integrity_check() {
    let db = clean_database("verify-corrupt");
    let (root, page_size): (u64, u64) = {
        let conn = open_db(&db.path);
        let root = conn
            .query_row(
                "SELECT rootpage FROM sqlite_schema WHERE name = 'idx_audit_call'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (
            root,
            conn.query_row("PRAGMA page_size", [], |r| r.get(0))
                .unwrap(),
        )
    };
    // The index is one leaf page here; its last bytes are an entry's values.
    let mut bytes = std::fs::read(&db.path).unwrap();
    let end = (root * page_size) as usize;
    bytes[end - 12..end - 4].copy_from_slice(b"CORRUPT!");
    std::fs::write(&db.path, bytes).unwrap();
    assert_breaks(&db, "SELECT 1", &["integrity_check"], "idx_audit_call");
}

/// `--help` exits 0; bad usage 2; a file that is missing or not a service
/// database 3, and a missing file is not created.
#[test]
fn usage_and_unreadable_files_have_their_own_exit_codes() {
    let help = run_verify(&["--help"]);
    assert!(help.status.success(), "{}", describe(&help));
    assert!(String::from_utf8_lossy(&help.stdout).contains("verify --db FILE"));
    for args in [&[][..], &["--db"], &["--frobnicate", "x"]] {
        let output = run_verify(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            describe(&output)
        );
    }
    let missing = TempDb::new("verify-missing");
    let output = run_verify(&["--db", missing.path_str()]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    assert!(!missing.path.exists(), "verify created the file");
    let not_a_db = TempDb::new("verify-not-a-db");
    std::fs::write(&not_a_db.path, b"this is not a database, just some text").unwrap();
    let output = run_verify(&["--db", not_a_db.path_str()]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let empty = TempDb::new("verify-empty");
    open_db(&empty.path)
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let output = run_verify(&["--db", empty.path_str()]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not an idempotent-tool database"));
}

/// Calls of tools that are not built in (a server run with `--tools`) are not
/// judged without the tools file: verify names them and asks for `--tools`
/// (exit 2) instead of reporting their effects as violations.
#[test]
fn calls_of_tools_it_does_not_know_ask_for_the_tools_file() {
    let db = clean_database("verify-unknown-tools");
    let charge = call_id(&db, CHARGE);
    let email = call_id(&db, EMAIL);
    open_db(&db.path)
        .execute_batch(&format!(
            "UPDATE calls SET tool = 'refund' WHERE call_id = '{charge}';
             UPDATE effects SET tool = 'refund' WHERE call_id = '{charge}';
             UPDATE calls SET tool = 'notify' WHERE call_id = '{email}';
             UPDATE effects SET tool = 'notify' WHERE call_id = '{email}';"
        ))
        .unwrap();
    let output = run_verify(&["--db", db.path_str()]);
    let text = describe(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("(notify, refund)"), "{text}");
    assert!(stderr.contains("--tools FILE"), "{text}");
    assert!(
        output.stdout.is_empty(),
        "no report without the tools\n{text}"
    );
}

/// A copy on a read-only mount: a database in WAL mode copied after a clean
/// stop (no `-wal`, and no `-shm` can be made there) verifies, as the file it
/// is, without a byte written; one whose `-wal` came along but whose `-shm`
/// cannot be made is refused (exit 3) with what to do, never read without
/// the commits its `-wal` holds. The mount is undone even when this fails.
#[test]
fn a_copy_on_a_read_only_mount_verifies_without_a_write() {
    let Some(mount) = Tmpfs::mount("16m") else {
        panic!("verify on a read-only mount needs root, to mount a tmpfs (CI runs as root)");
    };
    let db = TempDb::new("verify-read-only");
    let mut server = Server::start(&db, &[]);
    post_one_of_each(&server);
    crate::support::signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));
    assert!(
        file_bytes(&db, "-wal").is_none(),
        "a clean stop leaves no -wal"
    );
    let stopped = mount.dir.join("stopped.db");
    std::fs::copy(&db.path, &stopped).unwrap();
    let header = std::fs::read(&stopped).unwrap();
    assert_eq!(header[18..20], [2, 2], "the copy is in WAL mode");

    let mut server = Server::start(&db, &[]);
    let (status, call) = server.post("k-after", &json!({"tool": "charge", "args": {"amount": 3}}));
    assert_eq!(status, 202, "{call}");
    server.wait_terminal(call["call_id"].as_str().unwrap());
    server.kill();
    let with_wal = mount.dir.join("with-wal.db");
    std::fs::copy(&db.path, &with_wal).unwrap();
    std::fs::copy(
        format!("{}-wal", db.path_str()),
        mount.dir.join("with-wal.db-wal"),
    )
    .unwrap();

    mount.set_read_only(true);
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&mount.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let clean = run_verify(&["--db", stopped.to_str().unwrap()]);
    let text = describe(&clean);
    assert_eq!(clean.status.code(), Some(0), "{text}");
    assert!(
        text.contains("calls     5") && text.contains("violations 0"),
        "{text}"
    );
    assert_eq!(std::fs::read(&stopped).unwrap(), header, "the copy changed");

    let refused = run_verify(&["--db", with_wal.to_str().unwrap()]);
    let text = describe(&refused);
    assert_eq!(refused.status.code(), Some(3), "{text}");
    assert!(
        text.contains("its -wal holds commits") && text.contains("a copy made by `backup`"),
        "{text}"
    );
    assert_eq!(listing(), before, "verify made a file on the mount");
}
