//! Command-line flags, split the same way for every binary: the server
//! (`config`), `client`, `chaos_proxy`, `inspect` and the bench.
//!
//! It owns the splitting of arguments into flags and their values, the two
//! messages that splitting can produce (`--port needs a value`, `--chaos
//! takes no value`), and the wording of the three mistakes each binary names
//! (`FlagError::Unknown`, `Missing`, `BadValue`), so that every binary words
//! them alike. What a flag means, its default and how its value is checked
//! stay with the binary that owns the flag. It never prints and never exits:
//! each binary decides what a bad flag costs (usage on stderr, exit 2).
//!
//! The splitting itself is `lexopt`'s, so every binary also reads
//! `--name=VALUE`, and `--` ends the flags.

use lexopt::{Arg, Parser};
use std::fmt;

/// Why a command line could not be read as flags. The binaries add the
/// three mistakes only they can name (`Unknown`, `Missing`, `BadValue`), so
/// that every binary words them alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagError {
    /// A flag at the end of the line, without the value it takes.
    MissingValue(String),
    /// `--flag=value` for a flag that takes none.
    UnexpectedValue { flag: String, value: String },
    /// A value that is not UTF-8 (shown escaped).
    NotUtf8 { flag: String, value: String },
    /// A flag the binary does not know, as written.
    Unknown(String),
    /// A required flag that was not given, as its usage writes it (`--db FILE`).
    Missing(&'static str),
    /// A value the flag does not take: what it must be (`a port`).
    BadValue {
        flag: String,
        value: String,
        expected: &'static str,
    },
    /// Anything else the splitting reports.
    Other(String),
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlagError::MissingValue(flag) => write!(f, "{flag} needs a value"),
            FlagError::UnexpectedValue { flag, value } => {
                write!(f, "{flag} takes no value, not {value:?}")
            }
            FlagError::NotUtf8 { flag, value } => write!(f, "{flag} is not UTF-8: {value}"),
            FlagError::Unknown(flag) => write!(f, "unknown flag {flag:?}"),
            FlagError::Missing(flag) => write!(f, "expected {flag}"),
            FlagError::BadValue {
                flag,
                value,
                expected,
            } => write!(f, "{flag} must be {expected}, not {value:?}"),
            FlagError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for FlagError {}

/// The flags of one command line, read in order.
pub struct Flags {
    parser: Parser,
    /// The flag `next_flag` returned last, as written: names it in the
    /// "needs a value" message.
    current: String,
}

impl Flags {
    /// Read `args`, the arguments after the program name.
    pub fn new<I: IntoIterator<Item = String>>(args: I) -> Flags {
        Flags {
            parser: Parser::from_args(args),
            current: String::new(),
        }
    }

    /// The next flag as written (`--port`, `-h`); a word that is not a flag
    /// comes back as it is, for the binary to refuse by name. `None` after the
    /// last argument.
    pub fn next_flag(&mut self) -> Result<Option<String>, FlagError> {
        let arg = match self.parser.next() {
            Ok(Some(arg)) => arg,
            Ok(None) => return Ok(None),
            Err(lexopt::Error::UnexpectedValue { option, value }) => {
                return Err(FlagError::UnexpectedValue {
                    flag: option,
                    value: value.to_string_lossy().into_owned(),
                })
            }
            Err(other) => return Err(FlagError::Other(other.to_string())),
        };
        self.current = match arg {
            Arg::Long(name) => format!("--{name}"),
            Arg::Short(letter) => format!("-{letter}"),
            Arg::Value(word) => word.to_string_lossy().into_owned(),
        };
        Ok(Some(self.current.clone()))
    }

    /// The value of the flag just read: the next argument, even when it starts
    /// with `-`, so that `--lease-secs -1` is refused by the flag's own check
    /// rather than taken for another flag.
    pub fn value(&mut self) -> Result<String, FlagError> {
        let flag = &self.current;
        let value = self
            .parser
            .value()
            .map_err(|_| FlagError::MissingValue(flag.clone()))?;
        value.into_string().map_err(|value| FlagError::NotUtf8 {
            flag: flag.clone(),
            value: format!("{value:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        Flags::new(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_and_values_come_in_order() {
        let mut f = flags(&["--port", "0", "--chaos", "-h", "stray"]);
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("--port"));
        assert_eq!(f.value().unwrap(), "0");
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("--chaos"));
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("-h"));
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("stray"));
        assert_eq!(f.next_flag().unwrap(), None);
    }

    #[test]
    fn a_value_may_start_with_a_dash() {
        let mut f = flags(&["--lease-secs", "-1"]);
        f.next_flag().unwrap();
        assert_eq!(f.value().unwrap(), "-1");
    }

    #[test]
    fn equals_form_is_read_as_a_value() {
        let mut f = flags(&["--db=x.db"]);
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("--db"));
        assert_eq!(f.value().unwrap(), "x.db");
    }

    #[test]
    fn missing_and_unexpected_values_are_named() {
        let mut f = flags(&["--port"]);
        f.next_flag().unwrap();
        assert_eq!(f.value().unwrap_err().to_string(), "--port needs a value");
        let mut f = flags(&["--chaos=1"]);
        f.next_flag().unwrap();
        assert_eq!(
            f.next_flag().unwrap_err().to_string(),
            "--chaos takes no value, not \"1\""
        );
    }
}
