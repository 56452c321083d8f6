//! README, CONTRIBUTING and `docs/` stay true to the code and to each other:
//! every relative link reaches a file and a heading that exist, every
//! repository path they name exists, README stays a front page (at most 400 lines, the two
//! commands verbatim), its endpoint table lists exactly the routes the router
//! serves, its flags table exactly the flags the server accepts; the code map
//! of `docs/architecture.md` names exactly what is under `src/` and
//! `src/store/`; and the metrics table of
//! `docs/operations.md` names exactly the series a running server exposes.
//!
//! README's error-code table is held to `ErrorCode` by `src/http/error_code.rs`
//! and to `openapi.yaml` by `tests/openapi.rs`; the `//!` maps inside `src/`
//! are held to the modules by `module_maps.rs`.

use crate::support::openapi::ROOT;
use crate::support::{Http, Local, TempDb, SERVER_BIN};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// README's length limit: past it the front page is a manual again (issue 17).
const README_MAX_LINES: usize = 400;

/// Repository folders whose paths README and `docs/` may name in backticks.
const CHECKED_PREFIXES: &[&str] = &["src/", "tests/", "scripts/", "bench/", "docs/"];

/// The `*.md` files of `folder` (relative to the root), sorted.
fn markdown_in(folder: &str) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(format!("{ROOT}/{folder}"))
        .unwrap_or_else(|e| panic!("{folder}/: {e}"))
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new(folder).join(path.file_name().expect("a file name")))
        .collect();
    docs.sort();
    docs
}

/// README.md, CONTRIBUTING.md, every `docs/*.md` and the journal's pages, as
/// (path relative to the root, text).
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    let docs = markdown_in("docs");
    assert!(docs.len() >= 6, "docs/ holds the split README: {docs:?}");
    paths.extend(docs);
    paths.extend(markdown_in("docs/journal"));
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(&path))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, text)
        })
        .collect()
}

/// The lines of `text` outside fenced code blocks and HTML comments, with
/// their 1-based numbers: what a reader sees as prose, tables and headings.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut in_comment = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if line.trim_start().starts_with("<!--") {
            in_comment = !line.contains("-->");
            continue;
        }
        if in_comment {
            in_comment = !line.contains("-->");
            continue;
        }
        lines.push((index + 1, line));
    }
    lines
}

/// GitHub's anchor for a heading: lower case, every character but letters,
/// digits, `-`, `_` and spaces dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a document, duplicates numbered as GitHub does (`-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let count = seen.entry(base.clone()).or_insert(0);
        out.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` on one line.
fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn every_relative_link_reaches_an_existing_file_and_heading() {
    let documents = documents();
    let by_path: HashMap<&Path, &str> = documents
        .iter()
        .map(|(path, text)| (path.as_path(), text.as_str()))
        .collect();
    let mut checked = 0;
    let mut broken = Vec::new();
    for (path, text) in &documents {
        let folder = path.parent().unwrap_or(Path::new(""));
        for (number, line) in prose_lines(text) {
            for target in link_targets(line) {
                if target.starts_with("http://") || target.starts_with("https://") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let linked = if file.is_empty() {
                    path.clone()
                } else {
                    normalize(&folder.join(file))
                };
                let where_ = format!("{}:{number}: {target}", path.display());
                if !Path::new(ROOT).join(&linked).exists() {
                    broken.push(format!("{where_} (no file {})", linked.display()));
                    continue;
                }
                if anchor.is_empty() {
                    continue;
                }
                match by_path.get(linked.as_path()) {
                    Some(text) if anchors(text).contains(anchor) => {}
                    Some(_) => broken.push(format!("{where_} (no such heading)")),
                    None => broken.push(format!("{where_} (an anchor into a file not checked)")),
                }
            }
        }
    }
    assert!(checked >= 40, "links were read: {checked}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `docs/../README.md` as `README.md`: links are written relative to their file.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The paragraphs of `text` outside code blocks, each joined into one line (a
/// code span may wrap), with the number of its first line.
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut previous = 0;
    for (number, line) in prose_lines(text) {
        if line.trim().is_empty() {
            previous = 0;
            continue;
        }
        match out.last_mut() {
            Some((_, paragraph)) if previous + 1 == number => {
                paragraph.push(' ');
                paragraph.push_str(line.trim());
            }
            _ => out.push((number, line.trim().to_string())),
        }
        previous = number;
    }
    out
}

#[test]
fn every_repository_path_named_in_backticks_exists() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for (path, text) in documents() {
        for (number, paragraph) in paragraphs(&text) {
            for (index, span) in paragraph.split('`').enumerate() {
                // Odd pieces are inside backticks; a command's first word is checked.
                let Some(word) = span.split_whitespace().next().filter(|_| index % 2 == 1) else {
                    continue;
                };
                let word = word.trim_end_matches([',', ':', ';']);
                if !CHECKED_PREFIXES
                    .iter()
                    .any(|prefix| word.starts_with(prefix))
                    || word.contains(['*', '{', '<'])
                {
                    continue;
                }
                checked += 1;
                if !Path::new(ROOT).join(word).exists() {
                    missing.push(format!("{}:{number}: {word}", path.display()));
                }
            }
        }
    }
    assert!(checked >= 50, "paths were read: {checked}");
    assert!(
        missing.is_empty(),
        "named but absent:\n{}",
        missing.join("\n")
    );
}

fn readme() -> String {
    std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README.md")
}

/// The table rows of README's section `heading` (up to the next heading),
/// each as its trimmed cells, header and separator rows left out.
fn readme_table(heading: &str) -> Vec<Vec<String>> {
    let readme = readme();
    let section = readme
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("README has a {heading:?} section"));
    let section = section.split("\n#").next().unwrap_or(section);
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .skip(1)
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect();
    assert!(
        rows.len() >= 5,
        "README's {heading:?} table was read: {rows:?}"
    );
    rows
}

#[test]
fn readme_is_a_front_page_with_the_two_commands() {
    let readme = readme();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"
    );
    for command in [
        "cargo run --release -- --port 8081",
        "bash scripts/test.sh ",
    ] {
        assert!(
            readme
                .lines()
                .any(|line| line.starts_with(command) || line == command.trim_end()),
            "README lost the command {command:?}"
        );
    }
}

#[test]
fn readme_endpoint_table_lists_exactly_the_routes_served() {
    let mut listed = BTreeSet::new();
    for row in readme_table("## Endpoints") {
        let [method, path, _, details] = &row[..] else {
            panic!("an endpoint row has four cells: {row:?}");
        };
        assert!(
            details.contains("](docs/api.md#"),
            "{method} {path} links to its section of docs/api.md: {details}"
        );
        let method = method.trim_matches('`').to_string();
        let path = path.trim_matches('`').to_string();
        assert!(listed.insert((method, path)), "listed twice: {row:?}");
    }
    let routed: BTreeSet<(String, String)> = idempotent_tool::api::ROUTES
        .iter()
        .map(|(method, path)| (method.to_string(), path.to_string()))
        .collect();
    assert_eq!(
        listed, routed,
        "README's endpoint table against api::ROUTES"
    );
}

#[test]
fn readme_flags_table_lists_exactly_the_flags_the_server_accepts() {
    let listed: BTreeSet<String> = readme_table("### Flags")
        .iter()
        .map(|row| {
            let flag = row[0].trim_matches('`');
            flag.split_whitespace().next().unwrap_or(flag).to_string()
        })
        .collect();
    let help = Command::new(SERVER_BIN)
        .arg("--help")
        .output()
        .expect("the server runs");
    assert!(help.status.success(), "--help exits 0");
    let usage = String::from_utf8_lossy(&help.stdout);
    let accepted: BTreeSet<String> = usage
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|word| word.starts_with("--"))
        .map(str::to_string)
        .collect();
    assert!(accepted.len() >= 15, "usage was read: {usage}");
    assert_eq!(listed, accepted, "README's flags table against --help");
}

/// Every file and folder docs/architecture.md's code map names, each resolved against the
/// folder it is indented under.
fn code_map_entries() -> Vec<PathBuf> {
    let architecture = std::fs::read_to_string(format!("{ROOT}/docs/architecture.md"))
        .expect("docs/architecture.md");
    let section = architecture
        .split("\n## Code map\n")
        .nth(1)
        .expect("docs/architecture.md has a Code map");
    let tree = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the code map is a text block");
    let mut parents: Vec<PathBuf> = Vec::new();
    let mut entries = Vec::new();
    for line in tree.lines() {
        let indent = line.len() - line.trim_start().len();
        // Deeper lines continue the description above them.
        if indent % 2 == 1 || indent > 4 {
            continue;
        }
        let depth = indent / 2;
        let names = line.trim_start().split("  ").next().unwrap_or("");
        parents.truncate(depth);
        let folder = parents.last().cloned().unwrap_or_default();
        let mut child_folder = None;
        for name in names.split_whitespace() {
            if !(name.ends_with(".rs") || name.ends_with('/')) {
                continue;
            }
            let entry = folder.join(name);
            if name.ends_with('/') {
                child_folder = Some(entry.clone());
            }
            entries.push(entry);
        }
        if let Some(child) = child_folder {
            if parents.len() == depth {
                parents.push(child);
            }
        }
    }
    assert!(entries.len() >= 30, "the code map was read: {entries:?}");
    entries
}

#[test]
fn the_code_map_names_what_is_there_and_all_of_src_and_store() {
    let entries = code_map_entries();
    for entry in &entries {
        assert!(
            Path::new(ROOT).join(entry).exists(),
            "docs/architecture.md's code map names {}, which is not there",
            entry.display()
        );
    }
    for folder in ["src", "src/store"] {
        for item in std::fs::read_dir(Path::new(ROOT).join(folder)).expect(folder) {
            let item = item.expect("an entry").path();
            let name = item.file_name().expect("a name").to_string_lossy();
            let listed = PathBuf::from(folder).join(name.as_ref());
            assert!(
                entries.contains(&listed),
                "docs/architecture.md's code map leaves out {}",
                listed.display()
            );
        }
    }
}

/// `(name, type)` of every series in the metrics table of `docs/operations.md`;
/// a cell may name siblings by their suffix (`` `idempotent_tool_a`, `_b` ``).
fn documented_metrics() -> BTreeSet<(String, String)> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).expect("operations.md");
    let section = text
        .split("\n## Metrics: `GET /metrics`\n")
        .nth(1)
        .expect("docs/operations.md has a Metrics section");
    let section = section.split("\n#").next().unwrap_or(section);
    let mut out = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let (names, kind) = (cells[0], cells[1]);
        for name in names.split(", ") {
            let name = name.trim_matches('`');
            let name = name.split('{').next().unwrap_or(name);
            let full = if name.starts_with('_') {
                format!("idempotent_tool{name}")
            } else {
                name.to_string()
            };
            out.insert((full, kind.to_string()));
        }
    }
    assert!(out.len() >= 20, "the metrics table was read: {out:?}");
    out
}

#[test]
fn operations_metrics_table_lists_exactly_the_series_served() {
    let db = TempDb::new("docs-metrics");
    let server = Local::start(&db, &[]);
    let (status, _) = server.request("GET", "/healthz", &[], None);
    assert_eq!(status, 200);
    let response = server.call("GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    let text = String::from_utf8(response.body).expect("UTF-8");
    let served: BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.trim().to_string()))
        .collect();
    assert_eq!(
        documented_metrics(),
        served,
        "docs/operations.md's metrics table against /metrics"
    );
}
