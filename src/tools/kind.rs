//! The kinds of tool (`"kind"` in the tools file): which executor runs it.
//! `Kind::parse` is the one place a kind's word is read, and every `match`
//! on a kind names all three, so a new kind is a compile error wherever it
//! needs a decision. Also the built-in tools' names, which errors list.
//!
//! A leaf: it imports nothing of `tools`.

/// Which executor runs a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Builtin,
    Http,
    Command,
}

impl Kind {
    /// Every kind, in the order errors list them.
    pub const ALL: [Kind; 3] = [Kind::Builtin, Kind::Http, Kind::Command];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Builtin => "builtin",
            Kind::Http => "http",
            Kind::Command => "command",
        }
    }

    /// The kind `word` names, if any.
    pub fn parse(word: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.as_str() == word)
    }
}

/// Names of the built-in tools, as accepted in `"tool"`.
pub const TOOL_NAMES: [&str; 4] = ["charge", "send_email", "sleep", "fail"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_read_back_from_its_word_and_nothing_else_is_a_kind() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("Command"), None);
        assert_eq!(Kind::parse("shell"), None);
    }
}
