//! `deploy/idempotent-tool.service` is a unit systemd accepts without a
//! warning (`systemd-analyze verify`, with `ExecStart` pointed at the binary
//! this test run built), its command line is one the binary accepts, and it
//! has what the service needs: `Type=notify`, restart on failure, SIGTERM
//! with a stop timeout above the shutdown grace, a state directory, and the
//! sandbox; it sets no flag an environment file would set; logrotate signals
//! its main process only; and the drop-ins the docs suggest to relax the
//! sandbox for command tools are ones systemd accepts.

use crate::support::openapi::ROOT;
use crate::support::{print_config, SERVER_BIN};
use idempotent_tool::temp::TempDir;
use std::process::Command;

const INSTALLED_AT: &str = "/usr/local/bin/idempotent-tool";

fn unit() -> String {
    std::fs::read_to_string(format!("{ROOT}/deploy/idempotent-tool.service")).expect("the unit")
}

/// The value of `key=` in the unit (the last one, as systemd reads it).
fn setting<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .next_back()
}

#[test]
fn systemd_analyze_verifies_the_unit_without_a_warning() {
    let dir = TempDir::new("unit").unwrap();
    let path = dir.path().join("idempotent-tool.service");
    let text = unit();
    assert_eq!(setting(&text, "ExecStart"), Some(INSTALLED_AT), "{text}");
    std::fs::write(&path, text.replace(INSTALLED_AT, SERVER_BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (apt-get install systemd; scripts/test.sh does)");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_unit_runs_a_command_line_the_binary_accepts_and_stops_it_in_time() {
    let text = unit();
    let exec = setting(&text, "ExecStart").expect("ExecStart");
    let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    let printed = print_config(&args, &[]);
    let grace: f64 = printed
        .lines()
        .find_map(|l| l.strip_prefix("--shutdown-grace-secs"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("the grace in --print-config");
    let timeout: f64 = setting(&text, "TimeoutStopSec")
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec in seconds");
    assert!(
        timeout > grace + 5.0,
        "TimeoutStopSec {timeout} vs grace {grace}"
    );
    for (key, value) in [
        ("Type", "notify"),
        ("Restart", "on-failure"),
        ("RestartPreventExitStatus", "3"),
        ("KillSignal", "SIGTERM"),
        ("KillMode", "mixed"),
        ("StateDirectory", "idempotent-tool"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
    ] {
        assert_eq!(setting(&text, key), Some(value), "{key}");
    }
}

fn logrotate() -> String {
    std::fs::read_to_string(format!("{ROOT}/deploy/idempotent-tool.logrotate"))
        .expect("the logrotate file")
}

/// The commands between `postrotate` and `endscript`.
fn postrotate(text: &str) -> Vec<String> {
    let mut lines = text.lines().map(str::trim);
    lines
        .find(|l| *l == "postrotate")
        .expect("a postrotate script");
    lines
        .take_while(|l| *l != "endscript")
        .map(str::to_string)
        .collect()
}

/// Rotation signals the service's main process only: `systemctl reload`
/// (the unit's `ExecReload` sends SIGHUP to `$MAINPID`), never a
/// `systemctl kill` that reaches every process of the unit, its running
/// command tools included (SIGHUP would kill them, perhaps after their
/// effect). docs/operations.md shows the file as it is.
#[test]
fn logrotate_signals_only_the_main_process() {
    let text = logrotate();
    let script = postrotate(&text).join("\n");
    assert!(
        script.contains("systemctl reload idempotent-tool.service"),
        "{script}"
    );
    for command in script.split([';', '\n']).map(str::trim) {
        if command.contains("systemctl kill") || command.contains(" kill ") {
            assert!(command.contains("--kill-whom=main"), "{command}");
        }
        assert!(
            !command.contains("restart"),
            "rotation must not restart the service: {command}"
        );
    }
    let unit = unit();
    assert_eq!(
        setting(&unit, "ExecReload"),
        Some("/bin/kill -HUP $MAINPID")
    );
    let shown: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let operations =
        std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).expect("operations");
    assert!(
        operations.contains(&format!("```text\n{shown}```")),
        "docs/operations.md shows deploy/idempotent-tool.logrotate as it is:\n{shown}"
    );
}

/// The unit's `ExecStart` sets nothing an operator would put in the
/// environment file: an `IDEMPOTENT_TOOL_DB` there is the database the
/// service opens (a flag on `ExecStart` would win over it), and without one
/// the default `idem.db` is the state directory's, the working directory.
#[test]
fn the_unit_leaves_every_setting_to_the_environment_file() {
    let text = unit();
    assert_eq!(setting(&text, "ExecStart"), Some(INSTALLED_AT));
    let state = setting(&text, "StateDirectory").expect("StateDirectory");
    assert_eq!(
        setting(&text, "WorkingDirectory"),
        Some(format!("/var/lib/{state}").as_str())
    );
    let dir = TempDir::new("unit-env").unwrap();
    let db_row = |variables: &[(&str, &str)]| {
        let out = Command::new(SERVER_BIN)
            .arg("--print-config")
            .current_dir(dir.path())
            .env_clear()
            .envs(variables.iter().copied())
            .output()
            .expect("run the server");
        assert!(out.status.success(), "{out:?}");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        let row = printed
            .lines()
            .find(|l| l.starts_with("--db "))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
        row.unwrap_or_else(|| panic!("no --db row in {printed}"))
    };
    assert_eq!(db_row(&[]), "idem.db default");
    let url = "postgres://idem@db.example:5432/idem";
    assert_eq!(
        db_row(&[("IDEMPOTENT_TOOL_DB", url)]),
        format!("{url} IDEMPOTENT_TOOL_DB")
    );
}

/// The `ini` blocks of a section of a document: the drop-ins it suggests.
fn drop_ins(document: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("{ROOT}/{document}")).expect("the document");
    let section = text
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{document} has {heading:?}"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split("```ini\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .collect()
}

/// Every drop-in docs/tools.md suggests to relax the sandbox for a kind of
/// command tool is one systemd accepts beside the unit, without a warning
/// (a misspelt key would be ignored, and the tool would still break).
#[test]
fn the_sandbox_drop_ins_in_the_docs_are_ones_systemd_accepts() {
    let blocks = drop_ins("docs/tools.md", "## Command tools under the systemd unit");
    assert!(blocks.len() >= 5, "the drop-ins were read: {blocks:?}");
    let dir = TempDir::new("unit-drop-ins").unwrap();
    let unit_path = dir.path().join("idempotent-tool.service");
    std::fs::write(&unit_path, unit().replace(INSTALLED_AT, SERVER_BIN)).unwrap();
    let drop_in_dir = dir.path().join("idempotent-tool.service.d");
    for block in blocks {
        std::fs::create_dir_all(&drop_in_dir).unwrap();
        std::fs::write(drop_in_dir.join("relax.conf"), &block).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit_path)
            .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()))
            .output()
            .expect("systemd-analyze");
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{block}\n{said}"
        );
        std::fs::remove_dir_all(&drop_in_dir).unwrap();
    }
    let operations = std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).unwrap();
    assert!(
        operations.contains("printf '[Service]\\nMemoryDenyWriteExecute=no\\n'"),
        "docs/operations.md's drop-in is the first of docs/tools.md's"
    );
}
