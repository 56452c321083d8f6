//! The service's environment variables: `IDEMPOTENT_TOOL_` and a flag's name
//! in capitals, dashes as underscores (`IDEMPOTENT_TOOL_PORT` is `--port`);
//! `IDEMPOTENT_TOOL_<NAME>_FILE` reads the value from a file, as containers
//! pass secrets (`IDEMPOTENT_TOOL_DB_FILE=/run/secrets/db_url`). Also the
//! secret files themselves, and `--db-password-file`.
//!
//! A variable that names no flag is refused, so a typo is not ignored; an
//! empty one counts as unset. What a secret file holds is never put in a
//! message, and a URL read from one prints masked like any other.

use super::flags::{self, Flag};
use super::{Config, ConfigError, Origin};
use crate::store::Database;
use std::path::{Path, PathBuf};

/// Every service variable starts with this.
pub const PREFIX: &str = "IDEMPOTENT_TOOL_";

/// The suffix of a variable that names a file holding the value.
const FILE_SUFFIX: &str = "_FILE";

/// The service's variables in the process environment (those starting with
/// `PREFIX`), by name.
pub fn service_variables() -> Result<Vec<(String, String)>, ConfigError> {
    let mut variables = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().filter(|n| n.starts_with(PREFIX)) else {
            continue;
        };
        let value = value
            .into_string()
            .map_err(|_| ConfigError::NotUnicode(name.to_string()))?;
        variables.push((name.to_string(), value));
    }
    variables.sort();
    Ok(variables)
}

/// Take the service's variables out of the process environment once read,
/// so that no child (a `command` tool) inherits a database URL or a path to
/// a secret. Called before any other thread exists.
pub fn forget(variables: &[(String, String)]) {
    for (name, _) in variables {
        std::env::remove_var(name);
    }
}

/// The variable of `flag`: `--db-pool` is `IDEMPOTENT_TOOL_DB_POOL`.
pub fn variable_of(flag: &Flag) -> String {
    let name = flag.name.trim_start_matches("--");
    format!("{PREFIX}{}", name.to_ascii_uppercase().replace('-', "_"))
}

/// A variable as the flag it sets, and whether it names a file holding the
/// value; `None` for a variable that names no flag.
fn flag_of(variable: &str) -> Option<(&'static Flag, bool)> {
    let suffix = variable.strip_prefix(PREFIX)?;
    if !suffix
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let as_flag = |suffix: &str| {
        flags::find(&format!(
            "--{}",
            suffix.to_ascii_lowercase().replace('_', "-")
        ))
    };
    if let Some(flag) = as_flag(suffix) {
        return Some((flag, false));
    }
    let flag = as_flag(suffix.strip_suffix(FILE_SUFFIX)?)?;
    flag.takes_value.then_some((flag, true))
}

/// Set `config` from the service's variables, in `FLAGS` order.
pub fn apply(config: &mut Config, variables: &[(String, String)]) -> Result<(), ConfigError> {
    let mut found: Vec<(&'static Flag, bool, &str, &str)> = Vec::new();
    for (name, value) in variables {
        let (flag, from_file) =
            flag_of(name).ok_or_else(|| ConfigError::UnknownVariable(name.clone()))?;
        if value.is_empty() {
            continue;
        }
        if found.iter().any(|(other, ..)| other == &flag) {
            return Err(ConfigError::ValueAndFile {
                variable: variable_of(flag),
            });
        }
        found.push((flag, from_file, name, value));
    }
    found.sort_by_key(|(flag, ..)| flags::FLAGS.iter().position(|f| f == *flag));
    for (flag, from_file, name, value) in found {
        let in_variable = |error| ConfigError::Variable {
            variable: name.to_string(),
            error: Box::new(error),
        };
        let (value, origin) = if from_file {
            let path = PathBuf::from(value);
            let origin = Origin::VariableFile {
                variable: name.to_string(),
                path: path.clone(),
            };
            (read_secret(&path).map_err(in_variable)?, origin)
        } else {
            (value.to_string(), Origin::Variable(name.to_string()))
        };
        if flag.takes_value {
            flags::set(config, flag, &value).map_err(in_variable)?;
        } else if switch_is_on(flag, &value).map_err(in_variable)? {
            flags::set(config, flag, "")?;
        }
        config.origins.set(flag.name, origin);
    }
    Ok(())
}

/// A switch's variable: `1` or `true` turns it on, `0` or `false` leaves it off.
fn switch_is_on(flag: &Flag, value: &str) -> Result<bool, ConfigError> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(ConfigError::Flag(crate::flag::FlagError::BadValue {
            flag: flag.name.to_string(),
            value: value.to_string(),
            expected: "1 or true (on), 0 or false (off)",
        })),
    }
}

/// A value kept in a file: its text without the final line end. A file that
/// cannot be read or holds nothing is refused, naming the file only.
pub fn read_secret(path: &Path) -> Result<String, ConfigError> {
    let refuse = |reason: String| ConfigError::SecretFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if text.is_empty() {
        return Err(refuse("it is empty".to_string()));
    }
    Ok(text.to_string())
}

/// `--db-password-file`: the password of a PostgreSQL `--db` whose URL has
/// none, read from the file.
pub fn apply_password_file(config: &mut Config) -> Result<(), ConfigError> {
    let Some(path) = &config.db_password_file else {
        return Ok(());
    };
    let Database::Postgres(target) = &mut config.db else {
        return Err(ConfigError::Password("needs a postgres:// --db"));
    };
    if target.has_password() {
        return Err(ConfigError::Password(
            "the --db URL has a password too: give it in one place",
        ));
    }
    let password = read_secret(path)?;
    target.set_password(password.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_name_flags_and_their_files() {
        assert_eq!(
            flag_of("IDEMPOTENT_TOOL_DB_POOL").unwrap().0.name,
            "--db-pool"
        );
        assert_eq!(
            flag_of("IDEMPOTENT_TOOL_DB_FILE").unwrap(),
            (flags::find("--db").unwrap(), true)
        );
        // A flag whose own name ends in -file is that flag, not a file of another.
        assert_eq!(
            flag_of("IDEMPOTENT_TOOL_DB_PASSWORD_FILE").unwrap(),
            (flags::find("--db-password-file").unwrap(), false)
        );
        assert!(!flag_of("IDEMPOTENT_TOOL_CHAOS").unwrap().1);
        for unknown in [
            "IDEMPOTENT_TOOL_PROT",
            "IDEMPOTENT_TOOL_port",
            "IDEMPOTENT_TOOL_CHAOS_FILE",
            "IDEMPOTENT_TOOL_HELP",
            "IDEMPOTENT_TOOL_",
        ] {
            assert!(flag_of(unknown).is_none(), "{unknown}");
        }
        for flag in flags::FLAGS {
            assert_eq!(flag_of(&variable_of(flag)).unwrap().0, flag);
        }
    }
}
