//! The task table's own tests: each state a call passes through, the
//! per-tool slots, submissions replacing each other, lease extension, a
//! stop's close, calls that arrive already claimed, and each illegal
//! transition caught in a debug build.

use super::*;
use std::path::Path;

fn registry() -> ToolRegistry {
    let text = r#"{"tools": {
        "sleep": {"kind": "builtin", "max_concurrency": 2},
        "charge": {"kind": "builtin"}
    }}"#;
    ToolRegistry::from_json("t.json", text, Path::new("/"), &|_| None).unwrap()
}

fn table() -> TaskTable<&'static str> {
    TaskTable::new(&registry(), Duration::from_secs(30), "handle")
}

fn lease(call_id: &str, attempt: i64) -> Lease {
    Lease {
        call_id: call_id.into(),
        attempt,
        tool: "charge".into(),
        args_json: "{}".into(),
        effect_id: format!("e-{call_id}"),
        lease_until: 0.0,
    }
}

fn ids(tasks: impl IntoIterator<Item = Task>) -> Vec<String> {
    tasks.into_iter().map(|t| t.call_id).collect()
}

/// The calls of `leases`, sorted.
fn lease_ids<'a>(leases: impl IntoIterator<Item = &'a Lease>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = leases.into_iter().map(|l| l.call_id.as_str()).collect();
    ids.sort();
    ids
}

/// A cancel finds the running call's worker `Stop` and run (once: a second
/// one is no news), ignores another attempt's, and one that comes while
/// the call is still being claimed (or adopted, not yet started) is kept:
/// the worker's `Stop` is asked as it attaches, so the tool never starts.
#[test]
fn a_cancel_reaches_the_running_tool_or_waits_for_its_worker() {
    let tasks = table();
    let task = tasks.submit("c1", "charge", false).expect("admitted");
    assert!(tasks.take(&task));
    assert_eq!(
        tasks.cancel("c1", Some(1)),
        None,
        "claiming: kept for later"
    );
    let stop = Stop::new();
    assert!(tasks.claimed(&task, &lease("c1", 1), Some(&stop)));
    stop.begin(task.generation);
    assert!(stop.is_requested(), "asked as the worker attached");
    stop.end();

    let adopted = tasks.adopt(&lease("c2", 1), false).expect("open");
    assert_eq!(tasks.cancel("c2", Some(2)), None, "another attempt's");
    assert_eq!(tasks.cancel("c2", Some(1)), None, "no worker yet");
    assert!(tasks.starts(&adopted, Some(&stop)));
    stop.begin(adopted.generation);
    assert!(stop.is_requested());
    stop.end();

    let running = tasks.adopt(&lease("c3", 1), false).expect("open");
    assert!(tasks.starts(&running, Some(&stop)));
    assert_eq!(
        tasks.cancel("c3", None),
        Some((stop.clone(), running.generation))
    );
    assert_eq!(tasks.cancel("c3", None), None, "told already");
    assert_eq!(tasks.cancel("unknown", None), None);
    let mut running_ids: Vec<String> = tasks.running().into_iter().map(|l| l.call_id).collect();
    running_ids.sort();
    assert_eq!(running_ids, ["c1", "c2", "c3"]);
}

/// A call goes Queued → Claiming → Running → Returned → Completing and
/// leaves the table when finished; a second submission meanwhile is
/// refused, and after the finish the call may be taken on again.
#[test]
fn a_call_moves_through_every_state_once() {
    let tasks = table();
    let task = tasks.submit("c1", "charge", true).expect("admitted");
    assert_eq!(tasks.state("c1"), Some(State::Queued));
    assert_eq!(tasks.submit("c1", "charge", true), None, "already taken on");
    assert!(tasks.take(&task));
    assert_eq!(tasks.state("c1"), Some(State::Claiming));
    assert!(!tasks.take(&task), "taken once");
    assert!(tasks.claimed(&task, &lease("c1", 1), None));
    assert!(matches!(
        tasks.state("c1"),
        Some(State::Running {
            next_heartbeat: Some(_),
            ..
        })
    ));
    tasks.returned(&task);
    assert_eq!(
        tasks.state("c1"),
        Some(State::Returned {
            lease: lease("c1", 1)
        })
    );
    assert_eq!(tasks.completing(&task), Some("handle"));
    assert_eq!(
        tasks.state("c1"),
        Some(State::Completing {
            lease: LeaseHeld::from(&lease("c1", 1))
        })
    );
    assert_eq!(
        tasks.extended_leases(),
        [LeaseHeld::from(&lease("c1", 1))],
        "a completion in hand keeps its lease from recovery here"
    );
    assert_eq!(tasks.finish(&task), None);
    assert_eq!(tasks.state("c1"), None);
    assert!(tasks.submit("c1", "charge", true).is_some());
}

/// Over its tool's cap a call waits; each finish hands the slot to the
/// oldest waiting call, skipping one recovery forgot, and only with
/// nobody waiting is the slot given back. Uncapped tools never wait.
#[test]
fn a_capped_tool_admits_up_to_its_cap_and_hands_slots_on_in_order() {
    let tasks = table();
    let s1 = tasks.submit("s1", "sleep", false).expect("slot 1");
    let s2 = tasks.submit("s2", "sleep", false).expect("slot 2");
    for id in ["s3", "s4", "s5"] {
        assert_eq!(tasks.submit(id, "sleep", false), None);
        assert_eq!(tasks.state(id), Some(State::WaitingForSlot));
    }
    assert!(tasks.submit("c1", "charge", true).is_some(), "no cap");
    tasks.forget("s4");
    let s3 = tasks.finish(&s1).expect("s3 takes s1's slot");
    assert_eq!(tasks.state("s3"), Some(State::Queued));
    let s5 = tasks.finish(&s2).expect("s4 was forgotten: s5 next");
    assert_eq!(ids([s3.clone(), s5.clone()]), ["s3", "s5"]);
    assert_eq!(tasks.finish(&s3), None);
    assert_eq!(tasks.finish(&s5), None);
    // Both slots are free again.
    assert!(tasks.submit("s6", "sleep", false).is_some());
    assert!(tasks.submit("s7", "sleep", false).is_some());
    assert_eq!(tasks.submit("s8", "sleep", false), None);
}

/// A call recovery forgot and took on again belongs to the new
/// submission: the old task is not claimed, and neither its finish nor its
/// return touches the new entry; its completion still goes to the fence.
#[test]
fn a_newer_submission_owns_the_call() {
    let tasks = table();
    let old = tasks.submit("c1", "charge", false).unwrap();
    assert!(tasks.take(&old));
    assert!(tasks.claimed(&old, &lease("c1", 1), None));
    tasks.forget("c1");
    let new = tasks.submit("c1", "charge", false).expect("taken on again");
    assert_ne!(old.generation, new.generation);
    tasks.returned(&old);
    assert_eq!(tasks.completing(&old), Some("handle"), "the fence decides");
    assert_eq!(tasks.state("c1"), Some(State::Queued));
    tasks.finish(&old);
    assert_eq!(tasks.state("c1"), Some(State::Queued), "not the old one's");
    tasks.forget("c1");
    let newest = tasks.submit("c1", "charge", false).unwrap();
    assert!(!tasks.take(&new), "a stale task is not claimed");
    assert!(tasks.take(&newest));
}

/// Only running leases are extended, each at most once per third of the
/// lease; a lost lease is never extended again; a returned tool's lease
/// is not extended.
#[test]
fn leases_are_due_every_third_and_never_once_lost_or_returned() {
    let tasks = TaskTable::new(&registry(), Duration::from_secs(30), ());
    let [a, b, c] = ["a", "b", "c"].map(|id| {
        let task = tasks.submit(id, "charge", false).unwrap();
        assert!(tasks.take(&task));
        assert!(tasks.claimed(&task, &lease(id, 1), None));
        task
    });
    let soon = Instant::now() + Duration::from_secs(20);
    assert!(tasks.leases_due(Instant::now()).is_empty(), "just claimed");
    tasks.returned(&c);
    let due = tasks.leases_due(soon);
    assert_eq!(lease_ids(due.iter().map(|(l, _)| l)), ["a", "b"]);
    assert!(tasks.leases_due(Instant::now()).is_empty(), "just extended");
    assert!(tasks.lost(&lease("b", 1), b.generation));
    assert!(!tasks.lost(&lease("b", 1), b.generation), "news once");
    assert!(!tasks.lost(&lease("a", 2), a.generation), "another attempt");
    let due = tasks.leases_due(soon);
    assert_eq!(lease_ids(due.iter().map(|(l, _)| l)), ["a"]);
}

/// Closing takes out every lease still held (running or returned), drops
/// the calls waiting for a slot, keeps queued ones for their workers, and
/// takes nothing on any more; a claim won after the close is refused and
/// a completion after it is not handed over.
#[test]
fn close_hands_back_held_leases_and_takes_nothing_on() {
    let tasks = table();
    let run = |id: &str, tool: &str| {
        let task = tasks.submit(id, tool, false).unwrap();
        assert!(tasks.take(&task));
        assert!(tasks.claimed(&task, &lease(id, 1), None));
        task
    };
    let (running, returned) = (run("r1", "sleep"), run("r2", "sleep"));
    tasks.returned(&returned);
    assert_eq!(tasks.submit("w1", "sleep", false), None, "waits for a slot");
    let queued = tasks.submit("q1", "charge", false).unwrap();
    let claiming = tasks.submit("k1", "charge", false).unwrap();
    assert!(tasks.take(&claiming));
    assert_eq!(
        lease_ids(tasks.close().iter().map(|(l, _)| l)),
        ["r1", "r2"]
    );
    assert_eq!(tasks.state("w1"), None, "left pending for the next process");
    assert_eq!(tasks.state("q1"), Some(State::Queued));
    assert_eq!(tasks.submit("n1", "charge", false), None, "closed");
    assert!(
        !tasks.claimed(&claiming, &lease("k1", 1), None),
        "give it back"
    );
    assert_eq!(tasks.completing(&running), None, "released");
    assert_eq!(tasks.finish(&running), None, "nobody waits any more");
    assert!(tasks.take(&queued), "its worker finds it");
}

/// A call that arrives claimed (a poll's, or one created claimed) enters
/// `Running` under its lease, extended like any running call's, and replaces
/// a queued submission of the same call, whose worker then claims nothing.
/// Slots are reserved only up to the cap; a slot given back passes to the
/// oldest waiting call; a close hands adopted leases back and adopts or
/// reserves nothing more.
#[test]
fn a_call_arriving_claimed_runs_under_its_lease_in_a_reserved_slot() {
    let tasks = table();
    assert!(tasks.reserve_slot("sleep"));
    let sleep = |free: usize| vec![("sleep".to_string(), free)];
    assert_eq!(tasks.reserve_free_slots(5), sleep(1), "one of two left");
    assert!(!tasks.reserve_slot("sleep"), "at its cap");
    assert_eq!(tasks.reserve_free_slots(5), sleep(0), "none left to claim");
    assert!(tasks.reserve_slot("charge"), "no cap");
    assert_eq!(tasks.submit("w1", "sleep", false), None, "waits for a slot");
    let queued = tasks.submit("c1", "charge", false).expect("admitted");
    let adopted = tasks.adopt(&lease("c1", 1), false).expect("open");
    assert!(matches!(
        tasks.state("c1"),
        Some(State::Running {
            next_heartbeat: Some(_),
            ..
        })
    ));
    assert!(!tasks.take(&queued), "the queued submission claims nothing");
    assert_eq!(tasks.finish(&queued), None);
    assert!(tasks.starts(&adopted, None));
    let soon = Instant::now() + Duration::from_secs(20);
    let due = tasks.leases_due(soon);
    assert_eq!(lease_ids(due.iter().map(|(l, _)| l)), ["c1"], "extended");
    let w1 = tasks
        .give_back_slot("sleep")
        .expect("the waiting call's slot");
    assert_eq!(w1.call_id, "w1");
    assert_eq!(tasks.state("w1"), Some(State::Queued));
    let s1 = Lease {
        tool: "sleep".into(),
        ..lease("s1", 1)
    };
    assert!(tasks.adopt(&s1, false).is_some());
    assert_eq!(
        lease_ids(tasks.close().iter().map(|(l, _)| l)),
        ["c1", "s1"]
    );
    assert!(
        !tasks.starts(&adopted, None),
        "its lease is being given back"
    );
    assert!(tasks.adopt(&lease("c2", 1), false).is_none(), "closed");
    assert!(!tasks.reserve_slot("charge"), "closed");
    assert!(tasks.reserve_free_slots(5).is_empty(), "closed");
}

/// A completion handed to the store, then held for another try, keeps its
/// lease out of recovery's reach, as a running tool's is, through every
/// later hand-over to the store, until the call is finished; a stop's close keeps it for the last
/// try rather than releasing it.
#[test]
fn a_held_completion_keeps_its_lease_from_recovery_until_finished() {
    let tasks = table();
    let task = tasks.submit("c1", "charge", true).expect("admitted");
    assert!(tasks.take(&task));
    assert!(tasks.claimed(&task, &lease("c1", 1), None));
    tasks.returned(&task);
    assert_eq!(tasks.completing(&task), Some("handle"));
    let held = LeaseHeld::from(&lease("c1", 1));
    assert_eq!(
        tasks.extended_leases(),
        vec![held.clone()],
        "in the store's hands"
    );
    tasks.held(&task, held.clone());
    assert_eq!(tasks.extended_leases(), vec![held.clone()]);
    assert_eq!(tasks.completions(), Some("handle"), "handed again");
    assert_eq!(tasks.extended_leases(), vec![held.clone()]);
    assert_eq!(tasks.close(), vec![], "not released at a stop");
    assert_eq!(tasks.extended_leases(), vec![held]);
    tasks.finish(&task);
    assert_eq!(tasks.extended_leases(), vec![]);
}

/// A call taken by a worker, being claimed.
fn claiming(tasks: &TaskTable<&'static str>) -> Task {
    let task = tasks.submit("c1", "charge", true).expect("admitted");
    assert!(tasks.take(&task));
    task
}

/// A call whose tool runs under attempt 1's lease.
fn running(tasks: &TaskTable<&'static str>) -> Task {
    let task = claiming(tasks);
    assert!(tasks.claimed(&task, &lease("c1", 1), None));
    task
}

/// Each step out of order is a bug in the runner, never smoothed over: a
/// debug build stops at it, naming the transition and the state it was
/// asked to leave (or the slot, or the attempt).
#[test]
#[cfg(debug_assertions)]
fn every_illegal_transition_is_caught_in_a_debug_build() {
    type Steps = fn(&TaskTable<&'static str>);
    let cases: [(&str, Steps); 8] = [
        ("claimed from Queued", |tasks| {
            let task = tasks.submit("c1", "charge", true).expect("admitted");
            tasks.claimed(&task, &lease("c1", 1), None);
        }),
        ("returned from Claiming", |tasks| {
            tasks.returned(&claiming(tasks));
        }),
        ("completing from Claiming", |tasks| {
            let _ = tasks.completing(&claiming(tasks));
        }),
        ("held from Running", |tasks| {
            tasks.held(&running(tasks), LeaseHeld::from(&lease("c1", 1)));
        }),
        ("finished from Returned", |tasks| {
            let task = running(tasks);
            tasks.returned(&task);
            tasks.finish(&task);
        }),
        ("sleep: a slot given back that no call held", |tasks| {
            let _ = tasks.give_back_slot("sleep");
        }),
        ("a lease of attempt 0", |tasks| {
            tasks.claimed(&claiming(tasks), &lease("c1", 0), None);
        }),
        ("a lease of attempt 0", |tasks| {
            let _ = tasks.adopt(&lease("c1", 0), false);
        }),
    ];
    for (expected, steps) in cases {
        let tasks = table();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| steps(&tasks)));
        let payload = caught.expect_err(expected);
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        assert!(message.contains(expected), "{expected}: {message}");
    }
}

/// At a stop's end of grace every running tool's `Stop` is found; `close`
/// then says, for each lease it hands back, how the tool was stopped (its
/// worker's word), that it had not ended, or that nothing ran.
#[test]
fn a_stop_finds_every_running_tool_and_says_how_each_was_stopped() {
    let tasks = table();
    let start = |id: &str| {
        let task = tasks.adopt(&lease(id, 1), false).expect("open");
        let stop = Stop::new();
        assert!(tasks.starts(&task, Some(&stop)));
        stop.begin(task.generation);
        (task, stop)
    };
    let (halted, halted_stop) = start("h1");
    let (stuck, stuck_stop) = start("s1");
    let _idle = tasks.adopt(&lease("i1", 1), false).expect("open");
    let mut found: Vec<u64> = tasks.running_stops().iter().map(|(_, run)| *run).collect();
    found.sort();
    assert_eq!(
        found,
        [halted.generation, stuck.generation],
        "only started tools"
    );
    for (stop, run) in tasks.running_stops() {
        stop.request_for_shutdown(run);
    }
    assert!(halted_stop.is_requested() && halted_stop.is_shutdown());
    stuck_stop.mark_sent();
    tasks.returned(&halted);
    assert!(tasks.halted(&halted, true, "its process group got SIGTERM".into()));
    let mut closed = tasks.close();
    closed.sort_by(|a, b| a.0.call_id.cmp(&b.0.call_id));
    let said: Vec<(&str, &ToolAtRelease)> = closed
        .iter()
        .map(|(lease, tool)| (lease.call_id.as_str(), tool))
        .collect();
    assert_eq!(
        said,
        [
            (
                "h1",
                &ToolAtRelease::Stopped {
                    sent: true,
                    how: "its process group got SIGTERM".into()
                }
            ),
            ("i1", &ToolAtRelease::Idle),
            ("s1", &ToolAtRelease::StillStopping { sent: true }),
        ]
    );
    assert!(
        !tasks.halted(&stuck, false, "late".into()),
        "closed: its lease has gone back already"
    );
}
