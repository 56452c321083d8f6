//! `--print-config`: every configuring flag, the value in force, and where it
//! came from (the default, the command line, a variable, a variable's file,
//! or the command line over a variable that was set too, which it ignores).
//!
//! It shows values from the parsed `Config`, not the text given, so what it
//! prints is what the service would run with; and it can show no secret: the
//! database URL prints with its password masked, a password file by its
//! path, and nothing else the configuration holds is secret.

use super::environment::variable_of;
use super::flags::{shown, FLAGS};
use super::Config;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Where a flag's value came from; a flag not named here has its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    CommandLine,
    /// The command line, over this variable, which was set too: the
    /// variable is ignored, and the service says so at start-up.
    Overriding(String),
    /// The variable.
    Variable(String),
    /// A `_FILE` variable and the file it named.
    VariableFile {
        variable: String,
        path: PathBuf,
    },
}

/// The origin of every flag that was given, by flag name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins(BTreeMap<&'static str, Origin>);

impl Origins {
    pub fn set(&mut self, flag: &'static str, origin: Origin) {
        self.0.insert(flag, origin);
    }

    pub fn of(&self, flag: &str) -> Option<&Origin> {
        self.0.get(flag)
    }

    /// `flag` was given on the command line. If its variable set it too,
    /// the flag wins, and that is kept (`Overriding`) so that no setting is
    /// ignored without a word.
    pub fn set_by_command_line(&mut self, flag: &'static str) {
        let origin = match self.0.remove(flag) {
            Some(Origin::Variable(variable) | Origin::VariableFile { variable, .. }) => {
                Origin::Overriding(variable)
            }
            Some(overriding @ Origin::Overriding(_)) => overriding,
            _ => Origin::CommandLine,
        };
        self.0.insert(flag, origin);
    }

    /// Each flag given on the command line over a variable that was set,
    /// with that variable's name (never its value).
    pub fn overridden(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().filter_map(|(flag, origin)| match origin {
            Origin::Overriding(variable) => Some((*flag, variable.as_str())),
            _ => None,
        })
    }
}

/// The configuration as `--print-config` prints it: one line per flag.
pub fn describe(config: &Config) -> String {
    let mut text = String::from("# flag                  value                     from\n");
    for flag in FLAGS {
        let value = shown(config, flag).unwrap_or_default();
        let value = if value.is_empty() || value.contains(char::is_whitespace) {
            format!("{value:?}")
        } else {
            value
        };
        let from = match config.origins.of(flag.name) {
            None => "default".to_string(),
            Some(Origin::CommandLine) => "command line".to_string(),
            Some(Origin::Overriding(variable)) => format!("command line ({variable} ignored)"),
            Some(Origin::Variable(variable)) => variable.clone(),
            Some(Origin::VariableFile { variable, path }) => {
                format!("{variable} ({})", path.display())
            }
        };
        let _ = writeln!(text, "{:<23} {value:<24}  {from}", flag.name);
    }
    let _ = writeln!(
        text,
        "# every flag can also be set by its variable, e.g. {} for --port",
        variable_of(&FLAGS[1])
    );
    text
}
