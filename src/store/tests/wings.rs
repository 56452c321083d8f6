//! The store's shape, held: neither wing (`sqlite/`, `postgres/`) names the
//! other, and no file of the root but `mod.rs` — whose one dispatch opens a
//! backend — names either. A path names a wing when it reaches the store's
//! `sqlite` or `postgres` module (`super::sqlite`, `crate::store::postgres`,
//! `super::{postgres, ...}`); the `postgres` crate (`::postgres::Client`),
//! `temp::postgres`, comments and strings do not count.
//!
//! And the root speaks no driver: outside the wings (and the tests), no file
//! names the `rusqlite`, `tokio_postgres` or `postgres` crate — each wing
//! turns its driver's types into the root's (`StoreError`, `PgTarget`'s
//! settings stay in `postgres/target.rs`).

use std::path::{Path, PathBuf};

/// Which wing, if any, `file` (relative to `src/store/`) belongs to, and the
/// wings it must not name.
fn forbidden_for(file: &Path) -> &'static [&'static str] {
    if file.starts_with("sqlite") {
        &["postgres"]
    } else if file.starts_with("postgres") {
        &["sqlite"]
    } else if file == Path::new("mod.rs") {
        &[]
    } else {
        &["sqlite", "postgres"]
    }
}

/// `source` without comments and string literals, each run of whitespace
/// one space and none around `::`, `{`, `}` and `,`: what paths remain,
/// each written the same way however it was wrapped.
fn code_only(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        out.push(' ');
        let mut in_string = false;
        let mut escaped = false;
        let mut previous = ' ';
        for c in line.chars() {
            if in_string {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => escaped = false,
                }
                continue;
            }
            if c == '/' && previous == '/' {
                out.pop();
                break;
            }
            // A `'"'` is a character, not the start of a string.
            if c == '"' && previous != '\'' {
                in_string = true;
            } else if !c.is_whitespace() {
                out.push(c);
            } else if !out.ends_with(' ') {
                out.push(' ');
            }
            previous = c;
        }
    }
    let mut code = out;
    for tight in ["::", "{", "}", ","] {
        code = code
            .replace(&format!(" {tight}"), tight)
            .replace(&format!("{tight} "), tight);
    }
    code
}

/// The store's wings that `source` names.
fn wings_named(source: &str) -> Vec<&'static str> {
    let code = code_only(source);
    let mut named = Vec::new();
    for wing in ["sqlite", "postgres"] {
        let direct = ["super::", "store::"]
            .iter()
            .any(|prefix| names(&code, &format!("{prefix}{wing}")));
        let grouped = ["super::{", "store::{"].iter().any(|prefix| {
            code.match_indices(prefix).any(|(at, _)| {
                let group = &code[at + prefix.len()..];
                let group = &group[..group.find('}').unwrap_or(group.len())];
                group.split(',').any(|item| {
                    let path = item.split(' ').next().unwrap_or(item);
                    path == wing || path.starts_with(&format!("{wing}::"))
                })
            })
        });
        if direct || grouped {
            named.push(wing);
        }
    }
    named
}

/// Whether `code` holds `path` as a whole path segment (`super::sqlite` but
/// not `super::sqlite_file`).
fn names(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(at, _)| {
        let next = code[at + path.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a store folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The driver crates `source` names: a path starting with one (`rusqlite::`,
/// `::postgres::`, `tokio_postgres::`, or `use` of one), comments and
/// strings aside; the store's own `postgres` wing (`super::postgres`) is not
/// the crate.
fn drivers_named(source: &str) -> Vec<&'static str> {
    let code = code_only(source);
    let mut named = Vec::new();
    for driver in ["rusqlite", "tokio_postgres", "postgres"] {
        let found = code
            .match_indices(&format!("{driver}::"))
            .any(|(at, _)| starts_a_crate_path(&code[..at]));
        if found {
            named.push(driver);
        }
    }
    named
}

/// Whether a path segment after `before` is a crate's name: nothing of a
/// name just before it, and either no `::` before it or a `::` that follows
/// no module (`::postgres`, `use ::postgres`; `code_only` wrote `use::`).
fn starts_a_crate_path(before: &str) -> bool {
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    match before.strip_suffix("::") {
        None => !before.ends_with(is_name),
        Some(rest) => {
            let name_start = rest.rfind(|c: char| !is_name(c)).map_or(0, |i| i + 1);
            matches!(&rest[name_start..], "" | "use" | "pub")
        }
    }
}

#[test]
fn the_driver_scan_tells_a_crate_from_the_wing_and_from_text() {
    let cases: &[(&str, &[&str])] = &[
        ("use rusqlite::Connection;", &["rusqlite"]),
        ("fn f(e: rusqlite::Error) {}", &["rusqlite"]),
        (
            "let c = tokio_postgres::Config::new();",
            &["tokio_postgres"],
        ),
        ("use ::postgres::Client;", &["postgres"]),
        (
            "use postgres::fallible_iterator::FallibleIterator;",
            &["postgres"],
        ),
        ("use super::postgres::PgTarget;", &[]),
        ("use crate::store::postgres::listen;", &[]),
        ("// rusqlite::Error is mapped in the wing", &[]),
        ("let s = \"tokio_postgres::Error\";", &[]),
    ];
    for (source, expected) in cases {
        assert_eq!(drivers_named(source), *expected, "{source}");
    }
}

#[test]
fn the_root_names_no_driver_crate() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    rust_files(&store, &mut files);
    let mut wrong = Vec::new();
    for path in files {
        let file = path.strip_prefix(&store).expect("under src/store");
        let in_a_wing = file.starts_with("sqlite") || file.starts_with("postgres");
        let a_test = file.starts_with("tests") || file == Path::new("tests.rs");
        if in_a_wing || a_test {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("a source file");
        // A file's own unit tests may open a database to check it.
        let production = source.split("#[cfg(test)]").next().unwrap_or(&source);
        for driver in drivers_named(production) {
            wrong.push(format!("src/store/{} names {driver}", file.display()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_scan_tells_a_wing_from_a_crate_a_comment_and_a_string() {
    let cases: &[(&str, &[&str])] = &[
        ("use super::super::sqlite::writer::Then;", &["sqlite"]),
        ("use super::postgres::PgStore;", &["postgres"]),
        ("use crate::store::\n    postgres::listen;", &["postgres"]),
        (
            "use super::{model, postgres::listen, sqlite};",
            &["sqlite", "postgres"],
        ),
        ("use super::{\n    postgres as pg,\n};", &["postgres"]),
        ("use super::super::sqlite as wing;", &["sqlite"]),
        ("let b = super::super::sqlite::open(p, o);", &["sqlite"]),
        ("use ::postgres::Client;", &[]),
        ("use postgres::fallible_iterator::FallibleIterator;", &[]),
        ("use crate::temp::postgres::PgServer;", &[]),
        ("// see super::postgres::listen", &[]),
        ("let url = \"super::postgres\"; // a string", &[]),
        ("use super::sqlite_file;", &[]),
        ("Database::Sqlite(path) => x,", &[]),
    ];
    for (source, expected) in cases {
        assert_eq!(wings_named(source), *expected, "{source}");
    }
}

#[test]
fn neither_wing_names_the_other_and_the_root_names_neither_but_in_mod_rs() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    rust_files(&store, &mut files);
    assert!(files.len() >= 40, "the store was read: {files:?}");
    let mut wrong = Vec::new();
    for path in files {
        let file = path.strip_prefix(&store).expect("under src/store");
        let source = std::fs::read_to_string(&path).expect("a source file");
        for wing in wings_named(&source) {
            if forbidden_for(file).contains(&wing) {
                wrong.push(format!("src/store/{} names {wing}", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
