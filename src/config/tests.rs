//! The flags, the environment and the secret files, read into a `Config`.

use super::*;

fn parse(args: &[&str]) -> Result<Command, ConfigError> {
    Config::parse(args.iter().map(|s| s.to_string()))
}

#[test]
fn defaults_match_the_documentation() {
    let Command::Run(c) = parse(&[]).unwrap() else {
        panic!()
    };
    assert_eq!((c.host.as_str(), c.port), ("127.0.0.1", 8081));
    assert_eq!(c.db.sqlite_path(), Some(std::path::Path::new("idem.db")));
    assert_eq!(c.runner.workers, 8);
    assert_eq!(c.runner.lease, Duration::from_secs(30));
    assert_eq!(c.runner.recover_interval, Duration::from_millis(200));
    assert!(!c.runner.chaos);
    assert_eq!(c.answer_cache_bytes, 64 << 20);
    assert_eq!(c.max_pending, 4096);
    assert_eq!(c.store.retention.key_ttl, Some(DEFAULT_KEY_TTL));
    assert_eq!((c.log_level, c.access_log), (Level::Info, true));
    assert!(c.auth_file.is_none() && !c.insecure_no_auth);
}

#[test]
fn key_ttl_takes_fractions_and_zero_means_forever() {
    let ttl = |v: &str| match parse(&["--key-ttl", v]) {
        Ok(Command::Run(c)) => Ok(c.store.retention.key_ttl),
        Ok(_) => panic!(),
        Err(e) => Err(e),
    };
    assert_eq!(ttl("0.5"), Ok(Some(Duration::from_millis(500))));
    assert_eq!(ttl("0"), Ok(None));
    for bad in ["-1", "nan", "inf", "x", ""] {
        assert!(ttl(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_reachable_host_needs_auth_or_an_explicit_opt_out() {
    for host in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"] {
        assert!(parse(&["--host", host]).is_ok(), "{host}");
    }
    for host in ["0.0.0.0", "10.0.0.1", "::", "example.com"] {
        let err = parse(&["--host", host]).unwrap_err().to_string();
        assert!(
            err.contains("--auth-file") && err.contains("--insecure-no-auth"),
            "{err}"
        );
        assert!(parse(&["--host", host, "--insecure-no-auth"]).is_ok());
        assert!(parse(&["--host", host, "--auth-file", "a.json"]).is_ok());
    }
}

#[test]
fn flags_are_read() {
    let Command::Run(c) = parse(&[
        "--port",
        "0",
        "--db",
        "x.db",
        "--workers",
        "2",
        "--lease-secs",
        "0.5",
        "--answer-cache-mib",
        "3",
        "--max-pending",
        "7",
        "--tools",
        "t.json",
        "--chaos",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(c.tools_file, Some(PathBuf::from("t.json")));
    assert_eq!(c.tools.specs().count(), 4, "the built-ins until load_tools");
    assert_eq!(c.answer_cache_bytes, 3 << 20);
    assert_eq!(c.max_pending, 7);
    assert_eq!(c.port, 0);
    assert_eq!(c.db.sqlite_path(), Some(std::path::Path::new("x.db")));
    assert_eq!(c.runner.workers, 2);
    assert_eq!(c.runner.lease, Duration::from_millis(500));
    assert!(c.runner.chaos);
}

#[test]
fn bad_flags_are_refused() {
    for bad in [
        &["--nope"][..],
        &["--port"],
        &["--port", "70000"],
        &["--workers", "0"],
        &["--max-pending", "0"],
        &["--lease-secs", "-1"],
        &["--lease-secs", "nan"],
        &["--log-level", "verbose"],
        &["--access-log", "maybe"],
        &["--auth-file"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
    assert!(matches!(parse(&["--help"]), Ok(Command::Help)));
}

fn variables(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn parse_with(args: &[&str], pairs: &[(&str, &str)]) -> Result<Box<Config>, ConfigError> {
    match Config::parse_with(args.iter().map(|s| s.to_string()), &variables(pairs))? {
        Command::Run(config) | Command::PrintConfig(config) => Ok(config),
        other => panic!("{other:?}"),
    }
}

#[test]
fn variables_set_what_their_flags_would_and_flags_win() {
    let c = parse_with(
        &["--workers", "3"],
        &[
            ("IDEMPOTENT_TOOL_PORT", "9000"),
            ("IDEMPOTENT_TOOL_WORKERS", "5"),
            ("IDEMPOTENT_TOOL_CHAOS", "1"),
            ("IDEMPOTENT_TOOL_ACCESS_LOG", "off"),
            ("IDEMPOTENT_TOOL_TRUSTED_PROXY", "10.0.0.0/8"),
            ("IDEMPOTENT_TOOL_LOG_FILE", ""),
        ],
    )
    .unwrap();
    assert_eq!((c.port, c.runner.workers), (9000, 3));
    assert!(c.runner.chaos && !c.access_log);
    assert_eq!(c.trusted_proxies.to_string(), "10.0.0.0/8");
    assert_eq!(c.log_file, None, "an empty variable is unset");
    assert_eq!(
        c.origins.of("--port"),
        Some(&Origin::Variable("IDEMPOTENT_TOOL_PORT".into()))
    );
    assert_eq!(
        c.origins.of("--workers"),
        Some(&Origin::Overriding("IDEMPOTENT_TOOL_WORKERS".into()))
    );
    assert_eq!(c.origins.of("--db"), None);
    let overridden: Vec<(&str, &str)> = c.origins.overridden().collect();
    assert_eq!(overridden, [("--workers", "IDEMPOTENT_TOOL_WORKERS")]);
    let alone = parse_with(&["--workers", "3", "--workers", "4"], &[]).unwrap();
    assert_eq!(alone.origins.of("--workers"), Some(&Origin::CommandLine));
    assert_eq!(alone.origins.overridden().count(), 0);
    let off = parse_with(&[], &[("IDEMPOTENT_TOOL_CHAOS", "0")]).unwrap();
    assert!(!off.runner.chaos);
}

#[test]
fn a_bad_or_unknown_variable_is_refused_by_name() {
    for (pairs, says) in [
        (
            &[("IDEMPOTENT_TOOL_PROT", "1")][..],
            "IDEMPOTENT_TOOL_PROT names no flag",
        ),
        (
            &[("IDEMPOTENT_TOOL_PORT", "http")],
            "IDEMPOTENT_TOOL_PORT: --port must be",
        ),
        (
            &[("IDEMPOTENT_TOOL_CHAOS", "yes")],
            "IDEMPOTENT_TOOL_CHAOS: --chaos must be",
        ),
        (
            &[
                ("IDEMPOTENT_TOOL_DB", "a.db"),
                ("IDEMPOTENT_TOOL_DB_FILE", "f"),
            ],
            "IDEMPOTENT_TOOL_DB and IDEMPOTENT_TOOL_DB_FILE are both set",
        ),
    ] {
        let error = parse_with(&[], pairs).unwrap_err().to_string();
        assert!(error.contains(says), "{pairs:?}: {error}");
    }
}

#[test]
fn secrets_come_from_files_and_never_print() {
    let dir = crate::temp::TempDir::new("config-secrets").unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let url_file = write("db_url", "postgres://idem:url-s3cret@db.example/idem\n");
    let c = parse_with(
        &["--print-config"],
        &[("IDEMPOTENT_TOOL_DB_FILE", &url_file)],
    )
    .unwrap();
    let printed = describe(&c);
    assert!(printed.contains("idem:***@db.example/idem"), "{printed}");
    assert!(
        printed.contains(&format!("IDEMPOTENT_TOOL_DB_FILE ({url_file})")),
        "{printed}"
    );
    assert!(!printed.contains("url-s3cret"), "{printed}");

    let password = write("pw", "file-s3cret\r\n");
    let c = parse_with(
        &[
            "--db",
            "postgres://idem@db.example/idem",
            "--db-password-file",
            &password,
        ],
        &[],
    )
    .unwrap();
    let Database::Postgres(target) = &c.db else {
        panic!()
    };
    assert!(target.has_password());
    assert!(!describe(&c).contains("file-s3cret"));
    assert!(!format!("{c:?}").contains("file-s3cret"));

    let refused = |args: &[&str]| parse_with(args, &[]).unwrap_err().to_string();
    let with_url = refused(&[
        "--db",
        "postgres://idem:x@h/db",
        "--db-password-file",
        &password,
    ]);
    assert!(with_url.contains("give it in one place"), "{with_url}");
    assert!(refused(&["--db-password-file", &password]).contains("needs a postgres://"));
    let empty = write("empty", "\n");
    let error = refused(&["--db", "postgres://idem@h/db", "--db-password-file", &empty]);
    assert!(
        error.contains("is empty") && error.contains(&empty),
        "{error}"
    );
}

/// Every option `--help` lists is a configuring flag (and so has a
/// variable) or one of the three actions, and every configuring flag is
/// listed.
#[test]
fn every_option_in_the_help_has_a_variable() {
    let listed: Vec<&str> = OPTIONS
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|word| word.starts_with("--"))
        .collect();
    let actions = ["--print-config", "--version", "--help"];
    for option in &listed {
        assert!(
            actions.contains(option) || FLAGS.iter().any(|f| f.name == *option),
            "{option} is in --help but has no variable"
        );
    }
    for flag in FLAGS {
        assert!(
            listed.contains(&flag.name),
            "{} is not in --help",
            flag.name
        );
        assert!(variable_of(flag).starts_with(PREFIX));
    }
    assert_eq!(listed.len(), FLAGS.len() + actions.len());
}

/// `--accept-restored-copy` takes a snapshot's time exactly as `backup`
/// prints it, for the store to compare with the copy's mark.
#[test]
fn accept_restored_copy_takes_a_snapshot_time() {
    let c = parse_with(&["--accept-restored-copy", "2026-12-06T03:13:45.821Z"], &[]).unwrap();
    assert_eq!(
        c.store.accept_restored_copy.as_deref(),
        Some("2026-12-06T03:13:45.821Z")
    );
    assert_eq!(
        parse_with(&[], &[]).unwrap().store.accept_restored_copy,
        None
    );
    for bad in [
        "yes",
        "2026-12-06T03:13:45Z",
        "2026-12-06 03:13:45.821Z",
        "",
    ] {
        let refused = parse_with(&["--accept-restored-copy", bad], &[]).unwrap_err();
        assert!(
            refused.to_string().contains("the snapshot's time"),
            "{bad}: {refused}"
        );
    }
}
