//! The command blocks of README and `docs/` work when pasted, in order, into
//! a terminal where README's server already runs: every block is safe to
//! paste into zsh as well as bash (no `#` comment, which zsh's interactive
//! shell runs as a command; no unquoted `*` or `?`, which zsh refuses when
//! nothing matches; no `!` that history expansion would eat), every example
//! server has a port and a database of its own (only README's binds 8081),
//! whatever an example writes in the working directory is covered by
//! `.gitignore`, and the migrations table lists every version the binary
//! applies.
//!
//! The zsh rules are checked by reading the shell, not by running zsh, so the
//! test needs nothing installed.

use crate::support::openapi::ROOT;
use std::collections::BTreeMap;

/// One fenced `sh`/`bash` block: where it is, and its text.
struct Block {
    place: String,
    text: String,
}

/// Every `sh` and `bash` block of README.md and docs/*.md.
fn command_blocks() -> Vec<Block> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(format!("{ROOT}/docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut blocks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(format!("{ROOT}/{file}")).expect("a document");
        let mut open: Option<(usize, String)> = None;
        for (index, line) in text.lines().enumerate() {
            match (&mut open, line.trim_start()) {
                (None, fence) if fence == "```sh" || fence == "```bash" => {
                    open = Some((index + 1, String::new()))
                }
                (Some(_), "```") => {
                    let (start, text) = open.take().expect("an open block");
                    let place = format!("{file}:{start}");
                    blocks.push(Block { place, text });
                }
                (Some((_, body)), _) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert!(blocks.len() >= 30, "the command blocks were read");
    blocks
}

/// Where the scanner stands: unquoted, or inside quotes or `$( )`.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    Single,
    Double,
    /// Inside `$( )` (unquoted there), with the open parentheses it holds.
    Substitution(u32),
}

/// What zsh would do differently from bash with this block, line by line:
/// a comment, a glob that may match nothing, a history expansion, an
/// `=word` expansion. Here-document bodies are data and are skipped.
fn zsh_hazards(block: &str) -> Vec<String> {
    let mut hazards = Vec::new();
    let mut stack: Vec<Context> = Vec::new();
    let mut heredoc: Option<String> = None;
    for line in block.lines() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
            }
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let prev = if i == 0 { ' ' } else { chars[i - 1] };
            let next = chars.get(i + 1).copied().unwrap_or(' ');
            let word_start = i == 0 || prev.is_whitespace() || ";|&(".contains(prev);
            let mut hazard = |what: &str| hazards.push(format!("{what} in `{}`", line.trim()));
            match stack.last().copied() {
                Some(Context::Single) => {
                    if c == '\'' {
                        stack.pop();
                    }
                }
                Some(Context::Double) => match c {
                    '\\' => i += 1,
                    '"' => {
                        stack.pop();
                    }
                    '$' if next == '(' => {
                        stack.push(Context::Substitution(0));
                        i += 1;
                    }
                    '!' if !history_safe(next) => hazard("`!` (history)"),
                    _ => {}
                },
                unquoted => match c {
                    '\\' => i += 1,
                    '\'' => stack.push(Context::Single),
                    '"' => stack.push(Context::Double),
                    '$' if next == '(' => {
                        stack.push(Context::Substitution(0));
                        i += 1;
                    }
                    '(' => {
                        if let Some(Context::Substitution(depth)) = stack.last_mut() {
                            *depth += 1;
                        }
                    }
                    ')' => match stack.last_mut() {
                        Some(Context::Substitution(0)) => {
                            stack.pop();
                        }
                        Some(Context::Substitution(depth)) => *depth -= 1,
                        _ => {}
                    },
                    '#' if word_start => hazard("a `#` comment"),
                    '*' | '?' => hazard("an unquoted glob"),
                    '[' if !next.is_whitespace() && next != '[' && prev != '[' => {
                        hazard("an unquoted `[`")
                    }
                    '!' if !history_safe(next) => hazard("`!` (history)"),
                    '=' if word_start && next.is_ascii_alphanumeric() => hazard("`=word`"),
                    '<' if next == '<' && unquoted.is_none() => {
                        heredoc = Some(heredoc_end(&chars[i + 2..]));
                        i += 1;
                    }
                    _ => {}
                },
            }
            i += 1;
        }
    }
    if !stack.is_empty() {
        hazards.push("an unclosed quote or `$(`".into());
    }
    hazards
}

/// zsh expands history at a `!` (even `$!`'s) unless a blank, `=`, `(` or
/// `;` follows: `NODES+=($!)` and `"$!"` fail when pasted.
fn history_safe(next: char) -> bool {
    next.is_whitespace() || "=(;".contains(next)
}

/// The delimiter after `<<`: `-` dropped, quotes removed.
fn heredoc_end(rest: &[char]) -> String {
    let word: String = rest
        .iter()
        .skip_while(|c| **c == '-' || c.is_whitespace())
        .take_while(|c| !c.is_whitespace())
        .filter(|c| **c != '\'' && **c != '"')
        .collect();
    word
}

#[test]
fn every_command_block_is_safe_to_paste_into_zsh() {
    let mut found = Vec::new();
    for block in command_blocks() {
        for hazard in zsh_hazards(&block.text) {
            found.push(format!("{}: {hazard}", block.place));
        }
    }
    assert!(found.is_empty(), "not safe in zsh:\n{}", found.join("\n"));
}

/// The scanner itself: each hazard is seen, and what is safe is left alone.
#[test]
fn the_zsh_reader_sees_each_hazard_and_nothing_else() {
    for bad in [
        "cargo run  # start it",
        "# a comment line",
        "rm -f /tmp/x.db*",
        "curl http://h/x?wait=1",
        "echo a[1]",
        "echo \"done!now\"",
        "NODES+=($!)",
        "echo \"$!\"",
    ] {
        assert_eq!(zsh_hazards(bad).len(), 1, "{bad}");
    }
    for good in [
        "curl -sS 'http://h/x?wait=1' -H 'A: b'",
        "curl \"http://h/$ID?wait=2\"",
        "echo \"$(printf %s 'a b' | cut -d' ' -f1)\"",
        "cat > f <<'JSON'\n{\"a\": \"*?# [x]\"}\nJSON\necho ok",
        "sleep 1 &\nP=$!\nNODES+=($P); kill \"${NODES[@]}\" $!; wait $!",
        "grep -v '^#' x | head",
        "[[ -n $X ]] && [ -f y ]",
    ] {
        assert_eq!(zsh_hazards(good), Vec::<String>::new(), "{good}");
    }
}

/// Where a command block is: `FILE:LINE`.
type Place = String;

/// `--port N` and `--db PATH` of every server an example starts (a loop's
/// `for port in A B C` counts each), as (port or path, where).
/// The servers the examples start: each port and database, with its block.
struct ExampleServers {
    ports: Vec<(u16, Place)>,
    databases: Vec<(String, Place)>,
}

fn example_servers() -> ExampleServers {
    let (mut ports, mut databases) = (Vec::new(), Vec::new());
    for block in command_blocks() {
        let joined = block.text.replace("\\\n", " ");
        let mut loop_ports: Vec<u16> = Vec::new();
        for line in joined.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let Some(rest) = line.trim().strip_prefix("for port in ") {
                loop_ports = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse().ok())
                    .collect();
            }
            let starts_a_server = words
                .iter()
                .any(|w| w.ends_with("/idempotent-tool") || w.ends_with("/downstream"))
                || line.contains("cargo run --release -- --port");
            if !starts_a_server {
                continue;
            }
            let value_of = |flag: &str| {
                words
                    .iter()
                    .position(|w| *w == flag)
                    .and_then(|at| words.get(at + 1))
                    .map(|v| v.to_string())
            };
            match value_of("--port").as_deref() {
                Some("$port") => {
                    let found = loop_ports.iter().map(|p| (*p, block.place.clone()));
                    ports.extend(found);
                }
                Some(port) => {
                    if let Ok(port) = port.parse::<u16>() {
                        ports.push((port, block.place.clone()));
                    }
                }
                None => {}
            }
            if let Some(db) = value_of("--db").filter(|db| !db.starts_with('"')) {
                databases.push((db, block.place.clone()));
            }
        }
    }
    ExampleServers { ports, databases }
}

/// Pasted in order after README's quick start, no example may reach
/// README's server or another example's by mistake, nor share its database.
#[test]
fn every_example_server_has_its_own_port_and_database() {
    let ExampleServers { ports, databases } = example_servers();
    assert!(ports.len() >= 8, "the example servers were read: {ports:?}");
    let mut by_port: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for (port, place) in ports {
        by_port.entry(port).or_default().push(place);
    }
    for (port, places) in &by_port {
        assert_eq!(places.len(), 1, "port {port} is started by {places:?}");
        if *port == 8081 {
            assert!(
                places[0].starts_with("README.md"),
                "{places:?} takes README's port"
            );
        }
    }
    let mut by_db: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (db, place) in databases {
        by_db.entry(db).or_default().push(place);
    }
    for (db, places) in &by_db {
        let mut blocks = places.clone();
        blocks.dedup();
        assert_eq!(blocks.len(), 1, "database {db} is served by {places:?}");
        if db.ends_with("idem.db") && !db.starts_with('/') {
            assert!(
                blocks[0].starts_with("README.md"),
                "{blocks:?} serves README's idem.db"
            );
        }
    }
}

/// `.gitignore`'s patterns (`*` only, a leading `/` anchors to the root, a
/// trailing `/` is a folder), matched against a path relative to the root.
fn ignored(patterns: &[String], path: &str) -> bool {
    fn glob(pattern: &str, text: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == text,
            Some((head, tail)) => {
                text.starts_with(head)
                    && (head.len()..=text.len())
                        .any(|at| text.is_char_boundary(at) && glob(tail, &text[at..]))
            }
        }
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    patterns
        .iter()
        .any(|pattern| match pattern.strip_prefix('/') {
            Some(anchored) if anchored.ends_with('/') => path.starts_with(anchored),
            Some(anchored) => glob(anchored, path),
            None => glob(pattern, name),
        })
}

/// Whatever an example writes with a relative path (a `>` redirection,
/// `--db`, `--to`), and the files they leave beside README's database, is
/// ignored by git: running the docs from a clone leaves `git status` clean.
#[test]
fn what_the_examples_write_in_the_repository_is_ignored() {
    let text = std::fs::read_to_string(format!("{ROOT}/.gitignore")).expect(".gitignore");
    let patterns: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let mut written: Vec<String> = ["idem.db-wal", "idem.db-shm", "auth.json", "server.log"]
        .map(String::from)
        .to_vec();
    for block in command_blocks() {
        let words: Vec<&str> = block.text.split_whitespace().collect();
        for pair in words.windows(2) {
            let target = match pair[0] {
                ">" | "2>" | ">>" | "--db" | "--to" => pair[1],
                _ => continue,
            };
            // Inside a quoted string (SQL's `count(*) > 1`) it is no redirection.
            let quoted = target.contains(['"', '\'', ';']);
            let relative = !target.starts_with(['/', '$', '&']) && !target.contains("://");
            if quoted {
                continue;
            }
            if relative {
                written.push(target.to_string());
            }
        }
    }
    assert!(
        written.iter().any(|w| w == "idem.db"),
        "the writes were read"
    );
    let loose: Vec<&String> = written.iter().filter(|w| !ignored(&patterns, w)).collect();
    assert!(loose.is_empty(), "not covered by .gitignore: {loose:?}");
    assert!(!ignored(&patterns, "src/main.rs") && !ignored(&patterns, "README.md"));
}

/// The migrations table of docs/operations.md lists every version the
/// binary applies, in order.
#[test]
fn the_migrations_table_lists_every_version() {
    let text = std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).expect("operations");
    let section = text
        .split("\n## Upgrades and migrations\n")
        .nth(1)
        .expect("an Upgrades and migrations section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let listed: Vec<i64> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next())
        .filter_map(|n| n.parse().ok())
        .collect();
    let expected: Vec<i64> = (1..=idempotent_tool::store::SCHEMA_VERSION).collect();
    assert_eq!(listed, expected, "docs/operations.md's migrations table");
}
