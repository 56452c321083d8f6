//! `Secret`: a configured value (a header value, an `env` value) that must reach
//! the downstream and nothing else. It owns the redaction rule; it must never
//! let its text out through `Debug`, `Display` or an error message — only
//! [`Secret::expose`] gives it, and only executors call that.

use std::fmt;

/// A value read from the tools file (with `${NAME}` expanded) that is sent but
/// never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    /// The parts that came from `${NAME}` variables: a downstream or a script
    /// may echo a token without the `Bearer ` around it.
    expanded: Vec<String>,
}

/// Shorter pieces are not redacted on their own: replacing every `a` in an
/// error text would hide more than it protects.
const MIN_REDACTED_LEN: usize = 4;

impl Secret {
    pub fn new(value: String, expanded: Vec<String>) -> Secret {
        Secret { value, expanded }
    }

    /// The text to send. Callers pass it to the downstream and nowhere else.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// `text` with this secret (and each variable that went into it) replaced
    /// by `***`: for excerpts of what a downstream or a script said.
    pub fn redact(&self, text: &str) -> String {
        let mut pieces: Vec<&str> = std::iter::once(self.value.as_str())
            .chain(self.expanded.iter().map(String::as_str))
            .filter(|piece| piece.len() >= MIN_REDACTED_LEN)
            .collect();
        // Longest first, so a token inside the full value is not replaced
        // before the full value is.
        pieces.sort_by_key(|piece| std::cmp::Reverse(piece.len()));
        let mut text = text.to_string();
        for piece in pieces {
            if text.contains(piece) {
                text = text.replace(piece, "***");
            }
        }
        text
    }
}

/// `text` with every one of `secrets` redacted.
pub fn redact_all<'a>(text: &str, secrets: impl IntoIterator<Item = &'a Secret>) -> String {
    secrets
        .into_iter()
        .fold(text.to_string(), |text, secret| secret.redact(&text))
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let secret = Secret::new("Bearer tok-123".into(), vec!["tok-123".into()]);
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(
            format!("{:?}", vec![("h", secret.clone())]),
            "[(\"h\", Secret(***))]"
        );
        assert_eq!(secret.expose(), "Bearer tok-123");
    }

    #[test]
    fn redact_hides_the_value_and_its_variables() {
        let secret = Secret::new("Bearer tok-123".into(), vec!["tok-123".into()]);
        assert_eq!(
            secret.redact("got Bearer tok-123; token tok-123 is revoked"),
            "got ***; token *** is revoked"
        );
        let short = Secret::new("ab".into(), vec![]);
        assert_eq!(short.redact("abc"), "abc");
        assert_eq!(redact_all("x tok-123 y", [&secret, &short]), "x *** y");
    }
}
