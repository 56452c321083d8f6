//! Command-line flags, split the same way for every binary: the server
//! (`config`), `client`, `chaos_proxy`, `inspect` and the bench.
//!
//! It owns only the splitting of arguments into flags and their values, and
//! the two messages that splitting can produce (`--port needs a value`,
//! `--chaos takes no value`). What a flag means, its default, how its value is
//! checked and what an unknown flag is called stay with the binary that owns
//! the flag. It never prints and never exits: each binary decides what a bad
//! flag costs (usage on stderr, exit 2).
//!
//! The splitting itself is `lexopt`'s, so every binary also reads
//! `--name=VALUE`, and `--` ends the flags.

use lexopt::{Arg, Parser};

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
    pub fn next_flag(&mut self) -> Result<Option<String>, String> {
        let arg = match self.parser.next() {
            Ok(Some(arg)) => arg,
            Ok(None) => return Ok(None),
            Err(lexopt::Error::UnexpectedValue { option, value }) => {
                return Err(format!("{option} takes no value, not {value:?}"))
            }
            Err(other) => return Err(other.to_string()),
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
    pub fn value(&mut self) -> Result<String, String> {
        let flag = &self.current;
        let value = self
            .parser
            .value()
            .map_err(|_| format!("{flag} needs a value"))?;
        value
            .into_string()
            .map_err(|value| format!("{flag} is not UTF-8: {value:?}"))
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
        assert_eq!(f.value().unwrap_err(), "--port needs a value");
        let mut f = flags(&["--chaos=1"]);
        f.next_flag().unwrap();
        assert_eq!(
            f.next_flag().unwrap_err(),
            "--chaos takes no value, not \"1\""
        );
    }
}
