//! `rust-version` in `Cargo.toml` is the true minimum compiler: the newest
//! `rust-version` any package in `Cargo.lock` declares (for this platform),
//! or what our own code needs, whichever is newer. A lock-file update that
//! needs a newer compiler fails here until `Cargo.toml` says so; one that
//! needs an older one fails too, so the figure never overstates. Our own code
//! is held to the figure by clippy's `incompatible_msrv` lint (a standard
//! library API newer than `rust-version` is a warning, and CI denies them).

use crate::support::openapi::ROOT;
use serde_json::Value;
use std::process::Command;

/// What our own code needs without the dependencies: `Vec::extract_if`
/// (1.87) in the runner and `std::io::pipe` (1.87) in the tests.
const OWN_CODE_NEEDS: &str = "1.87";

fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text
        .split('.')
        .map(|p| p.parse::<u64>().expect("a version number"));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// The target this test runs on, as `rustc -vV` names it.
fn host() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc names its host")
        .to_string()
}

#[test]
fn cargo_toml_rust_version_is_the_newest_any_locked_package_needs() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--locked", "--offline", "--format-version", "1"])
        .args(["--filter-platform", &host()])
        .current_dir(ROOT)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == "idempotent-tool")
        .and_then(|p| p["rust_version"].as_str())
        .expect("Cargo.toml declares rust-version");
    let (needs, why) = packages
        .iter()
        .filter(|p| p["name"] != "idempotent-tool")
        .filter_map(|p| {
            let declared = p["rust_version"].as_str()?;
            Some((version(declared), format!("{} {}", p["name"], p["version"])))
        })
        .chain([(version(OWN_CODE_NEEDS), "our own code".to_string())])
        .max()
        .expect("something declares a version");
    assert!(packages.len() > 100, "the whole lock file was read");
    assert_eq!(
        version(ours),
        needs,
        "Cargo.toml says rust-version {ours}; {why} needs {needs:?}"
    );
}
