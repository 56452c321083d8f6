//! The call statuses are declared once, in `src/status.rs`; what is not
//! generated from that table is held to it here, so a status added there
//! that misses one of these places fails this test:
//! - every SQL list of status words (`status IN (…)`, `NOT IN (…)`) in
//!   `src/` is one of the table's named sets — every status, the terminal
//!   ones, the live ones, or those that let go of a business key — except a
//!   released migration's list that a later step replaced (`SUPERSEDED`)
//!   (test files, whose rows and filters are their own, are not read);
//! - every single status word a statement compares with is one the table
//!   knows;
//! - the console's `STATUSES` and `TERMINAL` (`format.js`) are the table's,
//!   in its order, and each status has a glyph there and a colour in
//!   `app.css`;
//! - every status `enum` of `openapi.yaml` is the table's, in its order.

use crate::support::rust_source::{rust_files, scan};
use idempotent_tool::status::Status;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Lists a released migration wrote and a later step replaced: history,
/// which never changes. Each entry: the file, the words, and why it stays.
const SUPERSEDED: &[(&str, &[&str], &str)] = &[
    (
        "src/store/postgres/schema.rs",
        &["pending", "running", "succeeded", "failed"],
        "step 1's `calls_status_known`; step 3 made it again with `cancelled`",
    ),
    (
        "src/store/postgres/schema.rs",
        &["succeeded", "failed"],
        "step 1's `calls_terminal` index; step 3 made it again with `cancelled`",
    ),
    (
        "src/store/postgres/schema.rs",
        &["pending", "running", "succeeded", "failed", "cancelled"],
        "step 3's `calls_status_known`; step 6 (approval.rs) made it again with \
         `awaiting_approval` and `denied`",
    ),
    (
        "src/store/postgres/schema.rs",
        &["succeeded", "failed", "cancelled"],
        "step 3's `calls_terminal` index; step 6 made it again with `denied`",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn words(filter: impl Fn(Status) -> bool) -> BTreeSet<String> {
    Status::ALL
        .iter()
        .filter(|s| filter(**s))
        .map(|s| s.as_str().to_string())
        .collect()
}

/// The sets a statement may name, by name.
fn named_sets() -> Vec<(&'static str, BTreeSet<String>)> {
    vec![
        ("every status", words(|_| true)),
        ("the terminal statuses", words(Status::is_terminal)),
        ("the live statuses", words(|s| !s.is_terminal())),
        (
            "the statuses that let go of a business key",
            words(Status::releases_business_key),
        ),
        (
            "the statuses a re-run brings back",
            words(Status::may_rerun),
        ),
    ]
}

/// One SQL list of status words found in a literal.
#[derive(Debug)]
struct StatusList {
    file: String,
    words: Vec<String>,
}

/// The quoted words of every `status [NOT] IN ( … )` in `sql`, and every
/// word compared with `status` alone (`= 'x'`, `<> 'x'`, `IS NOT 'x'`).
fn status_lists(sql: &str) -> (Vec<Vec<String>>, Vec<String>) {
    let (mut lists, mut singles) = (Vec::new(), Vec::new());
    let lower = sql.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("status") {
        let start = from + at;
        from = start + "status".len();
        let before = lower[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let after = lower[from..].trim_start();
        if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') && !starts_operator(after) {
            continue;
        }
        let rest = strip_words(after, &["not"]);
        if let Some(list) = rest
            .strip_prefix("in")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('('))
        {
            let inside = &list[..list.find(')').unwrap_or(list.len())];
            let quoted = quoted_words(inside);
            if !quoted.is_empty() {
                lists.push(quoted);
            }
            continue;
        }
        for op in [
            "=",
            "<>",
            "!=",
            "is not distinct from",
            "is distinct from",
            "is not",
            "is",
        ] {
            if let Some(value) = after.strip_prefix(op) {
                if let Some(word) = quoted_words(value.trim_start()).into_iter().next() {
                    if value.trim_start().starts_with('\'') {
                        singles.push(word);
                    }
                }
                break;
            }
        }
    }
    (lists, singles)
}

fn starts_operator(s: &str) -> bool {
    s.starts_with("in") && !s[2..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        || s.starts_with("not ")
        || s.starts_with("is ")
}

fn strip_words<'a>(s: &'a str, words: &[&str]) -> &'a str {
    let mut s = s;
    for w in words {
        if let Some(rest) = s.strip_prefix(w) {
            if rest.starts_with(char::is_whitespace) {
                s = rest.trim_start();
            }
        }
    }
    s
}

/// The `'…'` words at the start of `s` and after each comma.
fn quoted_words(s: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find('\'') {
        let Some(close) = rest[open + 1..].find('\'') else {
            break;
        };
        found.push(rest[open + 1..open + 1 + close].to_string());
        rest = &rest[open + 1 + close + 1..];
    }
    found
}

fn source_lists() -> (Vec<StatusList>, Vec<(String, String)>) {
    let (mut lists, mut singles) = (Vec::new(), Vec::new());
    for path in rust_files(&root().join("src")) {
        let file = relative(&path);
        if is_test_file(&file) {
            continue; // a test's own rows and filters are not the service's SQL
        }
        let source = scan(&std::fs::read_to_string(&path).unwrap());
        for literal in &source.literals {
            let (found, compared) = status_lists(literal);
            lists.extend(found.into_iter().map(|words| StatusList {
                file: file.clone(),
                words,
            }));
            singles.extend(compared.into_iter().map(|w| (file.clone(), w)));
        }
    }
    (lists, singles)
}

fn is_test_file(file: &str) -> bool {
    file.contains("/tests/") || file.ends_with("tests.rs")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Each SQL status list in `src/` names one of the table's sets.
#[test]
fn every_sql_status_list_is_one_of_the_tables_sets() {
    let (lists, _) = source_lists();
    // Both wings' retention, business keys and the verify invariants at least.
    assert!(lists.len() >= 8, "the scan found too few lists: {lists:?}");
    let sets = named_sets();
    let mut superseded_seen = vec![false; SUPERSEDED.len()];
    for list in &lists {
        let set: BTreeSet<String> = list.words.iter().cloned().collect();
        assert_eq!(set.len(), list.words.len(), "a word twice: {list:?}");
        if sets.iter().any(|(_, s)| *s == set) {
            continue;
        }
        let history = SUPERSEDED.iter().position(|(file, words, _)| {
            *file == list.file
                && words
                    .iter()
                    .copied()
                    .eq(list.words.iter().map(String::as_str))
        });
        match history {
            Some(i) => superseded_seen[i] = true,
            None => panic!(
                "{}: the status list {:?} is none of the status table's sets \
                 (src/status.rs): {:?}",
                list.file,
                list.words,
                sets.iter().map(|(name, s)| (name, s)).collect::<Vec<_>>()
            ),
        }
    }
    for (seen, (file, words, _)) in superseded_seen.iter().zip(SUPERSEDED) {
        assert!(
            seen,
            "{file} no longer has the superseded list {words:?}: drop it here"
        );
    }
}

/// A statement that compares `status` with one word names a status the
/// table knows (a typo would match no row, silently).
#[test]
fn every_status_word_in_sql_is_known() {
    let (_, singles) = source_lists();
    assert!(singles.len() >= 20, "the scan found too few: {singles:?}");
    for (file, word) in singles {
        if word.starts_with('{') {
            continue; // a test's `format!` placeholder, not a word
        }
        assert!(
            Status::parse(&word).is_ok(),
            "{file}: status '{word}' is not in src/status.rs"
        );
    }
}

/// The scanner itself: it finds what it is for, and nothing else.
#[test]
fn the_scanner_reads_lists_and_comparisons() {
    let (lists, singles) = status_lists(
        "UPDATE calls SET status = 'pending' WHERE c.status NOT IN ('failed', 'cancelled')
           AND status IN (?1, ?2) AND x.status IS NOT 'succeeded' AND statuses = 'no'
           AND status IN ('a','b')",
    );
    assert_eq!(lists, [vec!["failed", "cancelled"], vec!["a", "b"]]);
    assert_eq!(singles, ["pending", "succeeded"]);
}

/// The console's lists are the table's, and every status has its looks.
#[test]
fn the_consoles_statuses_are_the_tables() {
    let format = read("src/console/assets/js/format.js");
    let every: Vec<String> = Status::words().map(String::from).collect();
    assert_eq!(js_array(&format, "export const STATUSES = ["), every);
    let terminal: Vec<String> = Status::terminal_words().map(String::from).collect();
    assert_eq!(
        js_array(&format, "export const TERMINAL = new Set(["),
        terminal
    );
    let glyphs = &format[format
        .find("const GLYPHS = {")
        .expect("GLYPHS in format.js")..];
    let glyphs = &glyphs[..glyphs.find('}').unwrap()];
    let css = read("src/console/assets/app.css");
    for word in Status::words() {
        assert!(
            glyphs.contains(&format!("{word}:")),
            "format.js has no glyph for {word}"
        );
        assert!(
            css.contains(&format!(".status-{word}")),
            "app.css has no .status-{word}"
        );
    }
}

/// The quoted words of the JavaScript array that follows `start`.
fn js_array(text: &str, start: &str) -> Vec<String> {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("{start} not found"))
        + start.len();
    let inside = &text[at..at + text[at..].find(']').unwrap()];
    inside
        .split(',')
        .map(|w| w.trim().trim_matches('\'').to_string())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every status enum in `openapi.yaml` (an `enum` that names `pending`) is
/// the table's, in its order.
#[test]
fn the_openapi_status_enums_are_the_tables() {
    let yaml = read("openapi.yaml");
    let every: Vec<String> = Status::words().map(String::from).collect();
    let enums: Vec<Vec<String>> = yaml
        .lines()
        .filter_map(|line| line.trim().strip_prefix("enum: ["))
        .map(|rest| {
            rest.trim_end_matches(']')
                .split(',')
                .map(|w| w.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|words| words.iter().any(|w| w == "pending"))
        .collect();
    assert!(enums.len() >= 2, "openapi.yaml's status enums not found");
    for found in enums {
        assert_eq!(found, every, "an openapi.yaml status enum");
    }
}
