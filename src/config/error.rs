//! `ConfigError`: why the flags, the environment or a secret file do not make
//! a configuration. `main` answers each with one line and exit 2.
//!
//! A message names flags, variables and files, never a value read from a
//! secret file (nor a URL's password: `DatabaseUrlError` masks it).

use crate::flag::FlagError;
use crate::http::BadName;
use crate::http::NotAnAddress;
use crate::log::SettingError;
use crate::store::DatabaseUrlError;
use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Unknown, without its value, or a value it does not take.
    Flag(FlagError),
    /// An integer flag outside its range.
    OutOfRange {
        flag: String,
        value: String,
        min: u64,
        max: u64,
    },
    /// `--log-level` or `--access-log`.
    Setting(SettingError),
    /// `--db` names no usable database.
    Database(DatabaseUrlError),
    /// `--trusted-proxy` holds something that is not an address or network.
    TrustedProxy(NotAnAddress),
    /// A `--public-host` or `--allowed-origin` that could never match.
    Origin(BadName),
    /// A non-loopback `--host` without `--auth-file` or `--insecure-no-auth`
    /// (the host as given, at most 64 characters).
    ExposedWithoutAuth { host: String },
    /// A mistake in the value an environment variable gave.
    Variable {
        variable: String,
        error: Box<ConfigError>,
    },
    /// An `IDEMPOTENT_TOOL_` variable that names no flag (a typo would
    /// otherwise be ignored without a word).
    UnknownVariable(String),
    /// A variable whose value is not UTF-8.
    NotUnicode(String),
    /// Both `IDEMPOTENT_TOOL_X` and `IDEMPOTENT_TOOL_X_FILE`.
    ValueAndFile { variable: String },
    /// A secret file that cannot be read, or holds nothing.
    SecretFile { path: PathBuf, reason: String },
    /// `--db-password-file` without a PostgreSQL `--db`, or beside a URL
    /// that has a password of its own.
    Password(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Flag(e) => e.fmt(f),
            ConfigError::OutOfRange {
                flag,
                value,
                min,
                max,
            } => write!(
                f,
                "{flag} must be an integer from {min} to {max}, not {value:?}"
            ),
            ConfigError::Setting(e) => e.fmt(f),
            ConfigError::Database(e) => e.fmt(f),
            ConfigError::TrustedProxy(e) => write!(f, "--trusted-proxy: {e}"),
            ConfigError::Origin(e) => e.fmt(f),
            ConfigError::ExposedWithoutAuth { host } => write!(
                f,
                "--host {host:?} is not a loopback address: anyone who can reach it could read \
                 and make calls; give --auth-file, or --insecure-no-auth to serve without tokens"
            ),
            ConfigError::Variable { variable, error } => write!(f, "{variable}: {error}"),
            ConfigError::UnknownVariable(variable) => write!(
                f,
                "{variable} names no flag: a variable is IDEMPOTENT_TOOL_ and a flag's name in \
                 capitals, dashes as underscores, or that and _FILE"
            ),
            ConfigError::NotUnicode(variable) => write!(f, "{variable} is not UTF-8"),
            ConfigError::ValueAndFile { variable } => write!(
                f,
                "{variable} and {variable}_FILE are both set: give the value in one place"
            ),
            ConfigError::SecretFile { path, reason } => {
                write!(f, "cannot use the file {}: {reason}", path.display())
            }
            ConfigError::Password(why) => write!(f, "--db-password-file: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Flag(e) => Some(e),
            ConfigError::Setting(e) => Some(e),
            ConfigError::Database(e) => Some(e),
            ConfigError::TrustedProxy(e) => Some(e),
            ConfigError::Origin(e) => Some(e),
            ConfigError::Variable { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

impl From<FlagError> for ConfigError {
    fn from(error: FlagError) -> ConfigError {
        ConfigError::Flag(error)
    }
}
