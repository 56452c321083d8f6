//! Excerpts: how much of a downstream's body or a command's output a tool
//! keeps in an error or an effect's detail, cut on a character boundary.
//!
//! It only shortens text; it never decides what may be shown (secrets are
//! redacted by the executors before an excerpt is taken).

/// Longest excerpt of a downstream's body or a command's stderr kept in an
/// error or an effect's detail.
pub const EXCERPT_BYTES: usize = 4 * 1024;
/// Largest response body (`http`) or stdout (`command`) a tool may produce.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// At most `EXCERPT_BYTES` of `bytes` as text, cut on a character boundary.
pub fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT_BYTES)]);
    truncate_on_char(text.into_owned(), EXCERPT_BYTES)
}

/// The last `EXCERPT_BYTES` of `bytes` as text (stderr: the end says why).
pub fn tail_excerpt(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(EXCERPT_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]).into_owned();
    let mut cut = text.len().saturating_sub(EXCERPT_BYTES);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

fn truncate_on_char(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_on_character_boundaries() {
        let text = "é".repeat(EXCERPT_BYTES);
        let head = excerpt(text.as_bytes());
        assert!(head.len() <= EXCERPT_BYTES && head.chars().all(|c| c == 'é'));
        let tail = tail_excerpt(format!("start{}", "é".repeat(EXCERPT_BYTES)).as_bytes());
        assert!(tail.len() <= EXCERPT_BYTES && tail.chars().all(|c| c == 'é'));
        assert_eq!(tail_excerpt(b"short"), "short");
    }
}
