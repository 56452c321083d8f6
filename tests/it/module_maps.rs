//! The `//!` maps inside `src/` stay true, as `docs.rs` holds README's: a
//! module with modules of its own names every one of them in its map; every
//! plain name a map puts in backticks is one of those modules, a crate
//! module, or a word its own code uses, an item the crate declares or a
//! string it writes; and every file or folder a `//!` header names
//! (`x.rs`, `x/`) exists beside it or above it. So a renamed module cannot
//! leave its old name in a map, nor a new one be left out.

use crate::support::openapi::ROOT;
use crate::support::rust_source::{rust_files, scan, Source};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file of `src/`, scanned.
struct File {
    path: PathBuf,
    text: String,
    source: Source,
}

fn files() -> Vec<File> {
    let files: Vec<File> = rust_files(&Path::new(ROOT).join("src"))
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let source = scan(&text);
            let path = path
                .strip_prefix(ROOT)
                .expect("under the root")
                .to_path_buf();
            File { path, text, source }
        })
        .collect();
    assert!(files.len() >= 100, "src/ was read: {}", files.len());
    files
}

/// The words (identifiers, keywords, numbers) of `text`.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect()
}

/// The file's leading `//!` lines, without the markers.
fn header(text: &str) -> String {
    text.lines()
        .map_while(|line| line.strip_prefix("//!"))
        .map(|line| format!("{}\n", line.strip_prefix(' ').unwrap_or(line)))
        .collect()
}

/// The modules a file declares (`mod name;`, whatever its visibility).
fn children(file: &File) -> Vec<String> {
    file.source
        .code
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub").map_or(line, |rest| {
                rest.trim_start_matches(|c| c != ' ').trim_start()
            });
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// Where a module's own modules live: `x/` beside `x.rs`, or the folder of
/// `mod.rs` and `lib.rs`.
fn folder_of(path: &Path) -> PathBuf {
    match path.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs") => path.parent().expect("a folder").to_path_buf(),
        _ => path.with_extension(""),
    }
}

/// The pieces of `text` inside backticks.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn is_plain_name(span: &str) -> bool {
    span.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Every item name the crate declares, and every string it writes that is
/// one plain name (a tool, an error code, a status).
fn crate_names(files: &[File]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in files {
        let tokens: Vec<&str> = file
            .source
            .code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|t| !t.is_empty())
            .collect();
        let declares = [
            "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
        ];
        for pair in tokens.windows(2) {
            if declares.contains(&pair[0]) {
                names.insert(pair[1].to_string());
            }
        }
        let plain = file.source.literals.iter().filter(|l| is_plain_name(l));
        names.extend(plain.cloned());
    }
    names
}

#[test]
fn every_module_map_names_its_modules_and_only_what_exists() {
    let files = files();
    let by_path: BTreeMap<&Path, &File> = files.iter().map(|f| (f.path.as_path(), f)).collect();
    let top: Vec<String> = children(by_path[Path::new("src/lib.rs")]);
    let declared = crate_names(&files);
    let mut wrong = Vec::new();
    let mut roots = 0;
    for file in &files {
        let map = header(&file.text);
        let spans = backticked(&map);
        let folder = folder_of(&file.path);
        for span in spans
            .iter()
            .filter(|s| s.ends_with(".rs") || s.ends_with('/'))
        {
            let exists = folder
                .ancestors()
                .any(|above| Path::new(ROOT).join(above).join(span).exists());
            // A span from the root (`/ui/`) is a URL path, not a file.
            if !exists && !span.starts_with('/') && !span.contains(['*', '{', ' ', ':']) {
                wrong.push(format!(
                    "{}: names {span}, which is not there",
                    file.path.display()
                ));
            }
        }
        let children = children(file);
        if children.is_empty() {
            continue;
        }
        roots += 1;
        for child in children.iter().filter(|c| *c != "tests") {
            let named = spans.iter().any(|span| {
                let span = span.trim_end_matches('/').trim_end_matches(".rs");
                span == child
                    || span.ends_with(&format!("::{child}"))
                    || span.ends_with(&format!("/{child}"))
            });
            if !named {
                wrong.push(format!(
                    "{}: its map leaves out `{child}`",
                    file.path.display()
                ));
            }
        }
        let subtree = files.iter().filter(|f| {
            file.path.ends_with("lib.rs") || f.path == file.path || f.path.starts_with(&folder)
        });
        let mut used = BTreeSet::new();
        for f in subtree {
            used.extend(words(&f.source.code));
            f.source.literals.iter().for_each(|l| used.extend(words(l)));
        }
        for span in spans.into_iter().filter(|s| is_plain_name(s)) {
            let known = children.iter().any(|c| c == span)
                || top.iter().any(|t| t == span)
                || used.contains(span)
                || declared.contains(span);
            if !known {
                wrong.push(format!(
                    "{}: its map names `{span}`, which is no module here, no word of its code \
                     and nothing the crate declares",
                    file.path.display()
                ));
            }
        }
    }
    assert!(roots >= 20, "the module maps were read: {roots}");
    assert!(
        wrong.is_empty(),
        "module maps out of date:\n{}",
        wrong.join("\n")
    );
}
