//! `scripts/torture.sh`, bounded, run by `cargo test` so the script cannot rot:
//! three `kill -9`s (plus the final one) at random moments under a retrying,
//! chaos-hooked load, against the binaries cargo just built. Every accepted key
//! must keep its call, every call must end, and `verify` must pass. The full run
//! (`--kills 50`, optionally `--small-fs`) is for a person to start by hand.

use crate::support;

use std::process::Command;

/// The number printed after `label` on the line that contains it.
fn number_after(stdout: &str, label: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} in\n{stdout}"));
    let rest = &line[line.find(label).unwrap() + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {line:?}"))
}

/// Accepted calls survive `kill -9` at any moment: none lost, none run twice.
#[test]
fn accepted_calls_survive_kill_9_at_random_moments() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/torture.sh");
    let output = Command::new("bash")
        .arg(script)
        .args(["--kills", "3", "--clients", "3", "--chaos"])
        .args(["--min-gap-ms", "200", "--max-gap-ms", "700"])
        .env("IDEM_BIN_DIR", support::bin_dir())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!(
        "status {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    assert!(stdout.contains("[torture] PASS"), "{text}");
    assert_eq!(number_after(&stdout, "[torture] violations "), 0, "{text}");
    assert!(number_after(&stdout, "[torture] kills ") >= 4, "{text}");
    assert!(number_after(&stdout, "[torture] requests ") > 0, "{text}");
    assert!(
        number_after(&stdout, "checked ") > 0,
        "no accepted key checked\n{text}"
    );
    assert!(
        number_after(&stdout, "verify beside the live server ") >= 3,
        "{text}"
    );
    assert!(
        stdout.contains("violations 0: every invariant holds"),
        "{text}"
    );
}
