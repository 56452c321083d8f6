//! No import circles between the library's files: a file may use its
//! descendants' items (a parent's map and re-exports) and anything that does
//! not lead back to it, but no two files reach each other through their
//! paths. Each contract shared by siblings lives in a leaf of its folder
//! (issue 39) so that the sibling that implements it and the ones that use
//! it point one way.
//!
//! A small scan, not a resolver: each file's code (comments and literals
//! left out, `support::rust_source`) is read for paths that start `crate::`,
//! `super::` or `self::` — in `use` lines, grouped `{…}` imports included,
//! and inline — and each is resolved to the deepest file it names. The test
//! modules (`tests.rs`, `tests/`, `*_tests.rs`, a file's own
//! `#[cfg(test)]` tail) and the binaries under `src/bin/` are left out.

use crate::support::openapi::ROOT;
use crate::support::rust_source::{rust_files, scan};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A file's module path (`store::sqlite::writer`; `` for lib.rs).
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(format!("{ROOT}/src")).ok()?;
    let text = relative.to_str()?.strip_suffix(".rs")?;
    let text = text.strip_suffix("/mod").unwrap_or(text);
    match text {
        "lib" => Some(String::new()),
        "main" => None,
        _ if text.starts_with("bin/") => None,
        _ => Some(text.replace('/', "::")),
    }
}

fn is_test_file(module: &str) -> bool {
    module
        .split("::")
        .any(|part| part == "tests" || part.ends_with("_tests"))
}

/// `parent` of `module` (`` for a top-level one).
fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(up, _)| up)
}

fn join(base: &str, name: &str) -> String {
    match base {
        "" => name.to_string(),
        base => format!("{base}::{name}"),
    }
}

/// Every path in `code` that starts `crate::`, `super::` or `self::`,
/// written out whole (`super::{a, b::c}` gives `super::a` and
/// `super::b::c`), as segments.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let tight: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let tight = tight.replace(" ::", "::").replace(":: ", "::");
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in tight.match_indices(start) {
            let before = tight[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            expand(&tight[at..], &[], &mut out);
        }
    }
    out
}

/// Read one path (possibly with a `{…}` group) at the start of `text`.
fn expand(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segments = prefix.to_vec();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            if let Some(group) = rest.strip_prefix('{') {
                for item in split_group(group) {
                    expand(item.trim(), &segments, out);
                }
                return;
            }
            break;
        }
        segments.push(rest[..end].to_string());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if !segments.is_empty() {
        out.push(segments);
    }
}

/// The items of a `{…}` group (its text after `{`), split at top-level commas.
fn split_group(text: &str) -> Vec<&str> {
    let (mut depth, mut items, mut from) = (0usize, Vec::new(), 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[from..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The deepest known module a path names, from `module`.
fn resolve(module: &str, path: &[String], known: &BTreeSet<String>) -> Option<String> {
    let mut base = module.to_string();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => base = String::new(),
        Some("self") => {}
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base = parent(&base).to_string();
                rest = &rest[1..];
            }
            return deepest(&base, rest, known);
        }
        _ => return None,
    }
    deepest(&base, &rest[1..], known)
}

fn deepest(base: &str, rest: &[String], known: &BTreeSet<String>) -> Option<String> {
    let mut found = known.contains(base).then(|| base.to_string());
    let mut current = base.to_string();
    for segment in rest {
        current = join(&current, segment);
        if known.contains(&current) {
            found = Some(current.clone());
        } else {
            break;
        }
    }
    found
}

/// Each module's production code.
fn library() -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    for file in rust_files(Path::new(&format!("{ROOT}/src"))) {
        let Some(module) = module_of(&file) else {
            continue;
        };
        if is_test_file(&module) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let production = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(&text);
        modules.insert(module, scan(production).code);
    }
    modules
}

/// Who each module reaches, leaving out its own descendants.
fn edges(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, code) in modules {
        let reached: BTreeSet<String> = paths_in(code)
            .iter()
            .filter_map(|path| resolve(module, path, &known))
            .filter(|to| to != module && !is_descendant(to, module))
            .collect();
        edges.insert(module.clone(), reached);
    }
    edges
}

fn is_descendant(module: &str, of: &str) -> bool {
    of.is_empty() || module.starts_with(&format!("{of}::"))
}

/// The circles: every strongly connected set of more than one module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then sets on the reversed one.
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for start in edges.keys() {
        finish(start, edges, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to).or_default().push(from);
        }
    }
    let mut assigned = BTreeSet::new();
    let mut sets = Vec::new();
    for start in order.iter().rev() {
        if assigned.contains(start) {
            continue;
        }
        let mut set = vec![start.clone()];
        let mut stack = vec![start];
        assigned.insert(start.clone());
        while let Some(node) = stack.pop() {
            for next in reversed.get(node).into_iter().flatten() {
                if assigned.insert((*next).clone()) {
                    set.push((*next).clone());
                    stack.push(next);
                }
            }
        }
        if set.len() > 1 {
            set.sort();
            sets.push(set);
        }
    }
    sets
}

fn finish(
    node: &String,
    edges: &BTreeMap<String, BTreeSet<String>>,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<String>,
) {
    if !seen.insert(node.clone()) {
        return;
    }
    for next in edges.get(node).into_iter().flatten() {
        finish(next, edges, seen, order);
    }
    order.push(node.clone());
}

#[test]
fn the_scan_reads_grouped_inline_and_relative_paths() {
    let known: BTreeSet<String> = ["", "a", "a::b", "a::c", "a::c::d", "e"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let code = "use super::{b::{X, Y}, c::d::Z}; use crate::e::W; fn f() { super::c::g(); } \
                use std::fmt; let x = my_super::q;";
    let mut reached: Vec<String> = paths_in(code)
        .iter()
        .filter_map(|p| resolve("a::b", p, &known))
        .collect();
    reached.sort();
    reached.dedup();
    assert_eq!(reached, ["a::b", "a::c", "a::c::d", "e"]);
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("x", vec!["y"]),
        ("y", vec!["z"]),
        ("z", vec!["x"]),
        ("w", vec!["x"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(circles(&edges), [["x", "y", "z"]]);
}

#[test]
fn no_two_files_of_the_library_reach_each_other() {
    let modules = library();
    assert!(
        modules.len() > 150,
        "the library was read: {}",
        modules.len()
    );
    let edges = edges(&modules);
    let found = circles(&edges);
    let listed: Vec<String> = found.iter().map(|set| set.join(" ↔ ")).collect();
    let inside = |set: &Vec<String>| {
        set.iter()
            .map(|from| {
                let to: Vec<&String> = edges[from].iter().filter(|t| set.contains(t)).collect();
                format!("  {from} -> {to:?}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let detail: Vec<String> = found.iter().map(inside).collect();
    assert!(
        listed.is_empty(),
        "import circles: {listed:?}\n(each file's paths into its circle)\n{}",
        detail.join("\n\n")
    );
}
