//! What `--log-level` and `--access-log` accept: the [`Level`] filter and the
//! access-log switch, and [`SettingError`] for a value that is neither.
//!
//! It only parses; it never writes a line.

use std::fmt;

/// How much to log; each level includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// `--log-level error|warn|info|debug`.
    pub fn parse(text: &str) -> Result<Level, SettingError> {
        match text {
            "error" => Ok(Level::Error),
            "warn" => Ok(Level::Warn),
            "info" => Ok(Level::Info),
            "debug" => Ok(Level::Debug),
            _ => Err(SettingError::Level(text.chars().take(32).collect())),
        }
    }
}

/// `--access-log on|off`.
pub fn parse_access_log(text: &str) -> Result<bool, SettingError> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(SettingError::AccessLog),
    }
}

/// A `--log-level` or `--access-log` value that is not one of the choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingError {
    /// Not `error`, `warn`, `info` or `debug`: the first 32 characters given.
    Level(String),
    /// Neither `on` nor `off`.
    AccessLog,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingError::Level(given) => write!(
                f,
                "log level must be error, warn, info or debug, not {given:?}"
            ),
            SettingError::AccessLog => f.write_str("access log must be on or off"),
        }
    }
}

impl std::error::Error for SettingError {}
