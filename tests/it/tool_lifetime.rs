//! No tool outlives its lease: a `command` tool whose script starts a
//! child that ignores SIGTERM and a process that leaves its group
//! (`setsid`) is still running when the service is stopped — by SIGTERM
//! past `--shutdown-grace-secs`, or by `kill -9` — and a restart on the
//! same database runs the call's attempt 2. Every process of attempt 1 is
//! gone before attempt 2 starts: the script of attempt 2 looks for them
//! itself and writes what it found into the downstream record, and the
//! test checks the pids too.

use crate::support::{
    audit_events_and_attempts, downstream::ToolsFile, eventually, signal, Http, Server, TempDb,
};
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Attempt 1 records its pids and runs until it is killed; it and its
/// in-group child ignore SIGTERM, so only SIGKILL ends them, and a third
/// process leaves the group. Attempt 2 records which of attempt 1's pids
/// are still alive, and ends at once.
const SCRIPT: &str = r#"
if [ "$ATTEMPT" = 1 ]; then
  trap '' TERM
  (trap '' TERM; sleep 60; echo "grandchild end attempt=1" >> "$RECORD") &
  child=$!
  setsid sleep 60 &
  echo "pids attempt=1 $$ $child $!" >> "$RECORD"
  echo "start attempt=1" >> "$RECORD"
  sleep 60
  echo "end attempt=1" >> "$RECORD"
  exit 0
fi
alive=""
for pid in $(sed -n 's/^pids attempt=1 //p' "$RECORD"); do
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
  if [ -n "$state" ] && [ "$state" != Z ]; then alive="$alive $pid"; fi
done
echo "start attempt=$ATTEMPT alive-from-attempt-1=[${alive# }]" >> "$RECORD"
echo "end attempt=$ATTEMPT" >> "$RECORD"
echo '{"delivered":true}'
"#;

/// The downstream record: one line per step of each attempt. Dropping it
/// kills every pid it names and their groups (the script leads its own),
/// so a failing test leaves no process behind.
struct Record {
    _dir: TempDir,
    path: PathBuf,
}

impl Record {
    fn new(name: &str) -> Record {
        let dir = TempDir::new(name).unwrap();
        let path = dir.join("record");
        Record { _dir: dir, path }
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Attempt 1's pids: the script, its child, the process that left.
    fn first_pids(&self) -> Vec<u32> {
        self.lines()
            .iter()
            .find_map(|line| line.strip_prefix("pids attempt=1 ").map(str::to_string))
            .map(|pids| pids.split(' ').map(|p| p.parse().unwrap()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        for pid in self.first_pids() {
            for target in [format!("-{pid}"), pid.to_string()] {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &target])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
    }
}

/// Whether `pid` is a live process (a zombie is dead, not yet reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn tools(record: &Record) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {"deliver": {
        "kind": "command", "argv": ["/bin/sh", "-c", SCRIPT],
        "env": {"RECORD": record.path.to_str().unwrap()},
        "timeout_ms": 120000, "max_attempts": 3,
    }}}))
}

/// Start the service, post the call, and wait until attempt 1 runs with
/// all three processes.
fn attempt_1_running(db: &TempDb, flags: &[&str], record: &Record) -> (Server, String) {
    let server = Server::start(db, flags);
    let (status, call) = server.post("lifetime-1", &json!({"tool": "deliver", "args": {}}));
    assert_eq!(status, 202, "{call}");
    eventually("attempt 1 to run", || {
        record.lines().contains(&"start attempt=1".to_string())
    });
    let pids = record.first_pids();
    assert_eq!(pids.len(), 3, "{:?}", record.lines());
    assert!(pids.iter().all(|pid| alive(*pid)), "{pids:?}");
    (server, call["call_id"].as_str().unwrap().to_string())
}

/// A restart on the same database runs attempt 2, which found none of
/// attempt 1's processes alive; attempt 1 never reached its end.
fn restart_runs_attempt_2_alone(db: &TempDb, flags: &[&str], record: &Record, call_id: &str) {
    let restarted = Server::start(db, flags);
    let done = restarted.wait_terminal(call_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    let lines = record.lines();
    let steps: Vec<&str> = lines
        .iter()
        .filter(|line| !line.starts_with("pids "))
        .map(String::as_str)
        .collect();
    assert_eq!(
        steps,
        [
            "start attempt=1",
            "start attempt=2 alive-from-attempt-1=[]",
            "end attempt=2"
        ],
        "{lines:?}"
    );
}

/// SIGTERM with a 1 s grace while attempt 1 runs: when the grace is over
/// the tool's group gets SIGTERM, then SIGKILL, and whatever left the group
/// is killed too, all before the lease goes back (the audit says how) and
/// the process exits 0; the restart's attempt 2 finds none of them.
#[test]
fn a_stop_past_its_grace_stops_the_tool_before_the_next_attempt() {
    let record = Record::new("lifetime-term");
    let tools = tools(&record);
    let db = TempDb::new("lifetime-term");
    let flags = [
        "--tools",
        tools.path_str(),
        "--shutdown-grace-secs",
        "1",
        "--lease-secs",
        "600",
    ];
    let (mut server, call_id) = attempt_1_running(&db, &flags, &record);
    signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0), "{}", server.stderr());
    let pids = record.first_pids();
    let left: Vec<u32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
    assert_eq!(left, [] as [u32; 0], "attempt 1 outlived the stop");
    let released = audit_detail(&db, &call_id, "released");
    assert!(
        released.contains(
            "after its tool was stopped, sent=true: its process group got SIGTERM, then SIGKILL"
        ),
        "{released}"
    );
    assert!(server.stderr().contains("\"event\":\"tools_halted\""));
    restart_runs_attempt_2_alone(&db, &flags, &record, &call_id);
}

/// `kill -9` of the service while attempt 1 runs: every process of it is
/// gone within about a second, and a restart started at once waits for
/// them before attempt 2 starts.
#[test]
fn kill_9_of_the_service_ends_the_tool_before_the_next_attempt() {
    let record = Record::new("lifetime-kill");
    let tools = tools(&record);
    let db = TempDb::new("lifetime-kill");
    let flags = ["--tools", tools.path_str(), "--lease-secs", "600"];
    let (mut server, call_id) = attempt_1_running(&db, &flags, &record);
    server.kill();
    let killed = Instant::now();
    let pids = record.first_pids();
    std::thread::scope(|scope| {
        // The restart starts at once, beside the dying attempt.
        let restart = scope.spawn(|| restart_runs_attempt_2_alone(&db, &flags, &record, &call_id));
        let deadline = killed + Duration::from_secs(2);
        while pids.iter().any(|pid| alive(*pid)) {
            assert!(
                Instant::now() < deadline,
                "attempt 1 outlived kill -9 by 2 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        restart.join().unwrap();
    });
    let events: Vec<String> = audit_events_and_attempts(&db.path, &call_id)
        .into_iter()
        .map(|(event, attempt)| format!("{event}@{attempt}"))
        .collect();
    assert_eq!(
        events,
        [
            "created@0",
            "claimed@1",
            "recover@1",
            "claimed@2",
            "succeeded@2"
        ]
    );
}

/// The detail of the call's first `event` in the audit.
fn audit_detail(db: &TempDb, call_id: &str, event: &str) -> String {
    crate::support::open_db(&db.path)
        .query_row(
            "SELECT detail FROM audit WHERE call_id = ?1 AND event = ?2 ORDER BY rowid LIMIT 1",
            [call_id, event],
            |r| r.get(0),
        )
        .unwrap_or_else(|e| panic!("no {event} for {call_id}: {e}"))
}
