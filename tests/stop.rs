//! The stop path, in this process: a service started and stopped 50 times
//! leaves no thread behind — not the accept thread, a connection thread, a
//! worker, the recovery thread, nor the store's writer.

mod support;

use idempotent_tool::app::Service;
use idempotent_tool::client::request_once;
use idempotent_tool::config::Config;
use std::net::TcpStream;
use std::time::Duration;
use support::TempDb;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// One life of a service: a call accepted and finished, a keep-alive
/// connection left open and idle, then a stop.
fn start_use_stop(db: &TempDb) {
    let config = Config {
        port: 0,
        db: db.path.clone().into(),
        ..Config::default()
    };
    let service = Service::start(config).expect("start");
    let base = format!("http://{}", service.addr());
    let key = support::unique_name("stop");
    let body = support::charge(1).to_string();
    let posted = request_once(
        &base,
        "POST",
        "/v1/tool-calls?wait=5",
        &[("Idempotency-Key", &key)],
        Some(body.as_bytes()),
        Some(support::DEADLINE),
    )
    .expect("post");
    assert_eq!(posted.json()["status"], "succeeded", "{}", posted.json());
    // An idle connection: the stop must close it rather than wait it out.
    let idle = TcpStream::connect(service.addr()).unwrap();
    service.stop(Duration::from_secs(5));
    drop(idle);
}

#[test]
fn fifty_starts_and_stops_leave_no_thread_behind() {
    let db = TempDb::new("stop-50");
    start_use_stop(&db); // warm up whatever the runtime starts once
    let before = threads();
    for _ in 0..50 {
        start_use_stop(&db);
    }
    let after = threads();
    assert_eq!(before, after, "threads before and after 50 stops");
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE status = 'succeeded'"),
        51
    );
    assert_eq!(
        db.count("SELECT count(*) FROM instances WHERE stopped_at IS NULL"),
        0
    );
}
