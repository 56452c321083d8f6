//! Rust source read as text, for the tests that hold the code to its own
//! words (`pg_statements`, `module_maps`): a file's string literals as the
//! program sees them, and its code with comments and literals left out. A
//! small scanner, not a parser: it knows line and block comments, char
//! literals and lifetimes, and plain and raw strings, which is all this crate
//! writes.

use std::path::{Path, PathBuf};

/// One file, scanned.
pub struct Source {
    /// Every string literal outside comments, unescaped, in order.
    pub literals: Vec<String>,
    /// The code outside comments and literals.
    pub code: String,
}

/// Scan `text`.
pub fn scan(text: &str) -> Source {
    let chars: Vec<char> = text.chars().collect();
    let (mut literals, mut code) = (Vec::new(), String::new());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        match rest {
            ['/', '/', ..] => i = end_of_line(&chars, i),
            ['/', '*', ..] => i = end_of_block_comment(&chars, i),
            ['"', ..] | ['r', '"' | '#', ..] if rest[0] == '"' || !is_word(before(&chars, i)) => {
                let (literal, next) = match rest[0] {
                    'r' => raw_string(&chars, i + 1),
                    _ => plain_string(&chars, i + 1),
                };
                literals.push(literal);
                code.push(' ');
                i = next;
            }
            // A char literal ('"', '\'', 'x'); a lifetime has no closing quote.
            ['\'', '\\', ..] => i += 4 + rest[3..].iter().position(|&c| c == '\'').unwrap_or(0),
            ['\'', _, '\'', ..] => i += 3,
            [c, ..] => {
                code.push(*c);
                i += 1;
            }
            [] => unreachable!("i < len"),
        }
    }
    Source { literals, code }
}

fn before(chars: &[char], i: usize) -> Option<&char> {
    i.checked_sub(1).map(|at| &chars[at])
}

fn is_word(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

fn end_of_line(chars: &[char], from: usize) -> usize {
    chars[from..]
        .iter()
        .position(|&c| c == '\n')
        .map_or(chars.len(), |at| from + at)
}

fn end_of_block_comment(chars: &[char], from: usize) -> usize {
    (from + 2..chars.len())
        .find(|&i| chars[i - 1] == '*' && chars[i] == '/')
        .map_or(chars.len(), |i| i + 1)
}

/// The literal whose body starts at `from`, unescaped, and where it ends.
fn plain_string(chars: &[char], mut i: usize) -> (String, usize) {
    let mut out = String::new();
    while i < chars.len() {
        match chars[i] {
            '"' => return (out, i + 1),
            '\\' => {
                let escaped = chars.get(i + 1).copied().unwrap_or('\\');
                i += 2;
                match escaped {
                    // A line continuation drops the newline and the indentation.
                    '\n' => {
                        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
                            i += 1;
                        }
                    }
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    '0' => out.push('\0'),
                    other => out.push(other),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, i)
}

/// `r"…"` or `r#"…"#`, the `r` at `from - 1`.
fn raw_string(chars: &[char], from: usize) -> (String, usize) {
    let hashes = chars[from..].iter().take_while(|&&c| c == '#').count();
    let body = from + hashes + 1;
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let end = (body..chars.len())
        .find(|&i| chars[i..].starts_with(&closing))
        .unwrap_or(chars.len());
    let literal = chars[body..end].iter().collect();
    (literal, (end + closing.len()).min(chars.len()))
}

/// Every `.rs` file under `folder`, sorted.
pub fn rust_files(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn the_scanner_reads_literals_and_leaves_comments_out() {
    let source = scan(concat!(
        "// \"not a literal\"\n",
        "/* nor \"this\" */ let a: &'static str = \"a \\\"b\\\"\\n\\\n    c\";\n",
        "let q = '\"'; let r = r#\"raw \"x\"\"#; let e = '\\'';"
    ));
    assert_eq!(source.literals, ["a \"b\"\nc", "raw \"x\""]);
    assert!(!source.code.contains("literal") && !source.code.contains("this"));
    assert!(source.code.contains("static"));
}
