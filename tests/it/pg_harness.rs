//! The test PostgreSQL is removed even when its test process is killed:
//! this test runs itself again as a child that starts the shared server and
//! then waits to be killed; after `kill -9` of the child, the server's port
//! stops answering and its folder is gone (the reaper's work).

use idempotent_tool::temp::postgres::PgServer;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "IDEM_PG_HARNESS_CHILD";

/// Kills the child if the test fails before it does.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_test_process_leaves_no_postgres_behind() {
    if std::env::var_os(CHILD).is_some() {
        let server = PgServer::shared();
        println!("server {} {}", server.port(), server.dir().display());
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Child(
        Command::new(exe)
            .args([
                "--exact",
                "pg_harness::a_killed_test_process_leaves_no_postgres_behind",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("server "))
        .expect("the child started its server");
    let mut words = line.split_whitespace().skip(1);
    let port: u16 = words.next().unwrap().parse().unwrap();
    let dir = PathBuf::from(words.next().unwrap());
    assert!(dir.exists() && TcpStream::connect(("127.0.0.1", port)).is_ok());

    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.exists() || TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{} or port {port} outlived the killed test process",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
