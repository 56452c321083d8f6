//! The descriptor budget under a low open-file limit (`ulimit -n 256`, soft
//! and hard): the server lowers its connection cap to what the descriptors
//! allow and says so in its start-up line; a flood of connections then meets
//! that cap — `503 unavailable` with `Retry-After` — and never the limit
//! itself, where SQLite would fail with `unable to open database file`; and
//! a hundred requests waiting at once keep at most `MAX_READERS` read
//! connections open.

use crate::support;

use crate::support::procfs::{connection_threads, database_descriptors};
use crate::support::raw::{RawClient, ReplyText};
use crate::support::Http;
use crate::support::{address_after, Proc, Server, TempDb, SERVER_BIN};
use idempotent_tool::descriptors;
use idempotent_tool::store::MAX_READERS;
use serde_json::json;

const OPEN_FILE_LIMIT: u64 = 256;
/// Connections beyond the cap in the flood.
const EXCESS: usize = 40;

/// The server under `ulimit -n LIMIT` (which sets the hard limit too, so it
/// cannot raise its way out), and its start-up line.
fn start_limited(db: &TempDb, limit: u64) -> (Server, String) {
    let script = format!("ulimit -n {limit} && exec \"$0\" \"$@\"");
    let args = [&script, SERVER_BIN, "--port", "0", "--db", db.path_str()];
    let args: Vec<&str> = std::iter::once("-c").chain(args).collect();
    let (proc, line) = Proc::start("server", "bash", &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    let db = db.path.clone();
    (Server { proc, base, db }, line)
}

/// Under a 256-descriptor limit the cap is lowered and the start-up line says
/// so; with every slot held, each further connection is answered `503` with
/// `Retry-After`; the held connections' waiting requests are all answered,
/// none with a database error, while the server keeps at most `MAX_READERS`
/// read connections (plus the writer's) open on the file.
#[test]
fn a_low_open_file_limit_lowers_the_cap_and_a_flood_gets_503() {
    let db = TempDb::new("descriptors");
    let (server, banner) = start_limited(&db, OPEN_FILE_LIMIT);
    let cap = descriptors::budget(OPEN_FILE_LIMIT, 1024, descriptors::SQLITE)
        .unwrap()
        .max_connections;
    let expected = format!("max connections {cap} (lowered from 1024: open-file limit 256)");
    assert!(banner.contains(&expected), "{banner}");

    let (status, call) = server.post("slow", &json!({"tool": "sleep", "args": {"seconds": 10}}));
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap();
    let pid = server.proc.child.id();
    support::eventually("the POST's connection to end", || {
        connection_threads(pid).0 == 0
    });

    let mut held: Vec<RawClient> = (0..cap)
        .map(|_| RawClient::connect(server.addr()))
        .collect();
    support::eventually("every slot to be held", || connection_threads(pid).0 == cap);
    for _ in 0..EXCESS {
        let reply = RawClient::connect(server.addr()).reply();
        assert_eq!(
            (reply.status, reply.error_code()),
            (503, "unavailable".into())
        );
        assert_eq!(reply.header("retry-after"), Some("1"), "{}", reply.text());
    }

    let wait = format!("GET /v1/tool-calls/{call_id}?wait=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    for client in &mut held {
        client.send(wait.as_bytes());
    }
    std::thread::scope(|scope| {
        let answers = scope.spawn(|| {
            held.iter_mut()
                .map(|c| c.reply().status)
                .collect::<Vec<_>>()
        });
        let mut most = 0;
        while !answers.is_finished() {
            most = most.max(database_descriptors(pid, &db.path));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Each connection holds the file and its WAL: the readers, the writer
        // and the checkpointer; and the syncer keeps one handle on the WAL.
        assert!(
            most <= 2 * (MAX_READERS + 2) + 1,
            "{most} descriptors on the database"
        );
        let statuses = answers.join().unwrap();
        assert!(statuses.iter().all(|s| *s == 202), "{statuses:?}");
        eprintln!("descriptors: cap {cap}, {EXCESS} over it answered 503, {cap} waits answered 202, at most {most} descriptors on the database");
    });
    let stderr = server.stderr();
    assert!(!stderr.contains("unable to open"), "{stderr}");
}
