//! One test run alone in a child process of this test binary, for tests that
//! count what the whole process holds (its threads): in the one test binary,
//! other tests run beside it and start and end threads of their own.

use std::process::{Command, Stdio};

/// Set in the child: run the test's body instead of starting another child.
const ALONE: &str = "IDEM_TEST_ALONE_IN_PROCESS";

/// Run `body` in a fresh process of this test binary that runs only the test
/// `function` of `module` (pass `module_path!()`), on one test thread. The
/// parent fails when the child fails, or when the child ran no test (a renamed
/// function must not pass by running nothing).
pub fn alone_in_a_process(module: &str, function: &str, body: impl FnOnce()) {
    if std::env::var_os(ALONE).is_some() {
        body();
        return;
    }
    // The test's name is its path without the crate: `stop::fifty_...`.
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    let name = format!("{module}::{function}");
    let exe = std::env::current_exe().expect("this test binary's path");
    let out = Command::new(exe)
        .args([&name, "--exact", "--test-threads", "1", "--nocapture"])
        .env(ALONE, "1")
        .stdin(Stdio::null())
        .output()
        .expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed in its own process ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{name} did not run in its own process:\n{stdout}"
    );
}
