//! Every flag that configures the service: its name, whether it takes a
//! value, how a value sets the `Config` (`set`), and how the `Config` shows it
//! back (`shown`, for `--print-config`). The command line and the environment
//! go through the same `set`, so a value means the same wherever it comes
//! from. The flags that act instead of configuring (`--help`, `--version`,
//! `--print-config`) are not here.

use super::{Config, ConfigError};
use crate::flag::FlagError;
use crate::http::BadName;
use crate::http::TrustedProxies;
use crate::log::Level;
use crate::store::{Database, DbSchema, DB_SCHEMA_RULE};
use crate::tools::Keyless;
use std::path::PathBuf;
use std::time::Duration;

/// A flag that configures the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// As written: `--port`.
    pub name: &'static str,
    /// `false` for a switch (`--chaos`).
    pub takes_value: bool,
}

const fn value(name: &'static str) -> Flag {
    Flag {
        name,
        takes_value: true,
    }
}

const fn switch(name: &'static str) -> Flag {
    Flag {
        name,
        takes_value: false,
    }
}

/// Every configuring flag, in the order `--print-config` shows them.
pub const FLAGS: &[Flag] = &[
    value("--host"),
    value("--port"),
    value("--db"),
    value("--db-schema"),
    value("--db-password-file"),
    value("--db-pool"),
    value("--db-ca-file"),
    value("--db-timeout-ms"),
    value("--db-connect-timeout-ms"),
    value("--db-tcp-timeout-ms"),
    value("--accept-restored-copy"),
    value("--workers"),
    value("--lease-secs"),
    value("--tools"),
    value("--recover-interval-ms"),
    value("--busy-timeout-ms"),
    value("--request-timeout-ms"),
    value("--idle-timeout-ms"),
    value("--max-connections"),
    value("--max-pending"),
    value("--answer-cache-mib"),
    value("--shutdown-grace-secs"),
    value("--auth-file"),
    switch("--insecure-no-auth"),
    value("--mcp-wait-secs"),
    value("--mcp-keyless"),
    value("--mcp-content-window-secs"),
    value("--public-host"),
    value("--allowed-origin"),
    value("--key-ttl"),
    value("--log-level"),
    value("--access-log"),
    value("--log-file"),
    value("--trusted-proxy"),
    switch("--chaos"),
];

/// The configuring flag written `name`, if there is one.
pub fn find(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|flag| flag.name == name)
}

/// Set what `flag` configures from `value` (ignored for a switch, which it
/// turns on).
pub fn set(config: &mut Config, flag: &Flag, value: &str) -> Result<(), ConfigError> {
    let name = flag.name;
    match name {
        "--chaos" => config.runner.chaos = true,
        "--insecure-no-auth" => config.insecure_no_auth = true,
        "--auth-file" => config.auth_file = Some(PathBuf::from(value)),
        "--key-ttl" => config.store.retention.key_ttl = key_ttl(name, value)?,
        "--log-level" => config.log_level = Level::parse(value).map_err(ConfigError::Setting)?,
        "--access-log" => {
            config.access_log = crate::log::parse_access_log(value).map_err(ConfigError::Setting)?
        }
        "--log-file" => config.log_file = Some(PathBuf::from(value)),
        "--trusted-proxy" => {
            config.trusted_proxies =
                TrustedProxies::parse(value).map_err(ConfigError::TrustedProxy)?
        }
        "--host" => config.host = value.to_string(),
        "--port" => config.port = number(name, value, 0..=65535)? as u16,
        "--db" => config.db = Database::parse(value).map_err(ConfigError::Database)?,
        "--db-schema" => {
            config.db_schema =
                DbSchema::parse(value).ok_or_else(|| bad_value(name, value, DB_SCHEMA_RULE))?
        }
        "--db-password-file" => config.db_password_file = Some(PathBuf::from(value)),
        "--accept-restored-copy" => {
            config.store.accept_restored_copy = Some(snapshot_time(name, value)?)
        }
        "--db-pool" => config.store.pool_size = number(name, value, 1..=10_000)? as usize,
        "--db-ca-file" => config.store.ca_file = Some(PathBuf::from(value)),
        "--db-timeout-ms" => config.store.pg_timeouts.operation = millis(name, value, 1)?,
        "--db-connect-timeout-ms" => config.store.pg_timeouts.connect = millis(name, value, 1)?,
        "--db-tcp-timeout-ms" => config.store.pg_timeouts.tcp = millis(name, value, 1000)?,
        "--tools" => config.tools_file = Some(PathBuf::from(value)),
        "--workers" => config.runner.workers = number(name, value, 1..=1024)? as usize,
        "--lease-secs" => config.runner.lease = seconds(name, value)?,
        "--recover-interval-ms" => config.runner.recover_interval = millis(name, value, 1)?,
        "--busy-timeout-ms" => config.store.busy_timeout = millis(name, value, 0)?,
        "--request-timeout-ms" => config.limits.request_timeout = millis(name, value, 1)?,
        "--idle-timeout-ms" => config.limits.idle_timeout = millis(name, value, 1)?,
        "--mcp-wait-secs" => config.mcp_wait = seconds_or_zero(name, value)?,
        "--mcp-keyless" => {
            config.mcp_keyless = match value {
                "auto" => None,
                _ => Some(
                    Keyless::parse(value)
                        .ok_or_else(|| bad_value(name, value, "auto, content, fresh or reject"))?,
                ),
            }
        }
        "--mcp-content-window-secs" => config.mcp_content_window = seconds(name, value)?,
        "--public-host" => each(value, |name| config.trusted_names.add_public_host(name))?,
        "--allowed-origin" => each(value, |origin| {
            config.trusted_names.add_allowed_origin(origin)
        })?,
        "--shutdown-grace-secs" => config.shutdown_grace = seconds(name, value)?,
        "--max-connections" => {
            config.limits.max_connections = number(name, value, 1..=1_000_000)? as usize
        }
        "--max-pending" => config.max_pending = number(name, value, 1..=10_000_000)? as usize,
        "--answer-cache-mib" => {
            config.answer_cache_bytes = (number(name, value, 0..=65_536)? as usize) << 20
        }
        other => return Err(FlagError::Unknown(other.to_string()).into()),
    }
    Ok(())
}

/// What `flag` is set to in `config`, as `--print-config` shows it: the
/// database URL with its password masked; `none` for a file not given.
pub fn shown(config: &Config, flag: &Flag) -> Option<String> {
    let path = |path: &Option<PathBuf>| match path {
        Some(path) => path.display().to_string(),
        None => "none".to_string(),
    };
    let list = |items: &[String]| match items {
        [] => "none".to_string(),
        items => items.join(","),
    };
    let on_off = |on: bool| if on { "on" } else { "off" }.to_string();
    let millis = |d: Duration| d.as_millis().to_string();
    let secs = |d: Duration| d.as_secs_f64().to_string();
    Some(match flag.name {
        "--host" => config.host.clone(),
        "--port" => config.port.to_string(),
        // `Display` masks a URL's password.
        "--db" => config.db.to_string(),
        "--db-schema" => config.db_schema.to_string(),
        "--db-password-file" => path(&config.db_password_file),
        "--db-pool" => config.store.pool_size.to_string(),
        "--db-ca-file" => path(&config.store.ca_file),
        "--db-timeout-ms" => millis(config.store.pg_timeouts.operation),
        "--db-connect-timeout-ms" => millis(config.store.pg_timeouts.connect),
        "--db-tcp-timeout-ms" => millis(config.store.pg_timeouts.tcp),
        "--accept-restored-copy" => match &config.store.accept_restored_copy {
            Some(snapshot) => snapshot.clone(),
            None => "none".to_string(),
        },
        "--workers" => config.runner.workers.to_string(),
        "--lease-secs" => secs(config.runner.lease),
        "--tools" => path(&config.tools_file),
        "--recover-interval-ms" => millis(config.runner.recover_interval),
        "--busy-timeout-ms" => millis(config.store.busy_timeout),
        "--request-timeout-ms" => millis(config.limits.request_timeout),
        "--idle-timeout-ms" => millis(config.limits.idle_timeout),
        "--max-connections" => config.limits.max_connections.to_string(),
        "--max-pending" => config.max_pending.to_string(),
        "--answer-cache-mib" => (config.answer_cache_bytes >> 20).to_string(),
        "--shutdown-grace-secs" => secs(config.shutdown_grace),
        "--auth-file" => path(&config.auth_file),
        "--insecure-no-auth" => on_off(config.insecure_no_auth),
        "--mcp-wait-secs" => secs(config.mcp_wait),
        "--mcp-keyless" => config
            .mcp_keyless
            .map_or("auto", Keyless::as_str)
            .to_string(),
        "--mcp-content-window-secs" => secs(config.mcp_content_window),
        "--public-host" => list(&config.trusted_names.public_hosts),
        "--allowed-origin" => list(&config.trusted_names.allowed_origins),
        "--key-ttl" => secs(config.store.retention.key_ttl.unwrap_or_default()),
        "--log-level" => config.log_level.as_str().to_string(),
        "--access-log" => on_off(config.access_log),
        "--log-file" => path(&config.log_file),
        "--trusted-proxy" if config.trusted_proxies.is_empty() => "none".to_string(),
        "--trusted-proxy" => config.trusted_proxies.to_string(),
        "--chaos" => on_off(config.runner.chaos),
        _ => return None,
    })
}

/// A snapshot's time as `backup` prints it: `2026-12-06T03:13:45.821Z`.
fn snapshot_time(flag: &str, value: &str) -> Result<String, ConfigError> {
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    let fits = value.len() == shape.len()
        && value.bytes().zip(shape.bytes()).all(|(v, s)| match s {
            b'd' => v.is_ascii_digit(),
            other => v == other,
        });
    if !fits {
        return Err(bad_value(
            flag,
            value,
            "the snapshot's time as backup and the refusal print it, e.g. 2026-12-06T03:13:45.821Z",
        ));
    }
    Ok(value.to_string())
}

/// Each name of a comma-separated list (a flag given twice adds to it).
fn each(value: &str, mut add: impl FnMut(&str) -> Result<(), BadName>) -> Result<(), ConfigError> {
    value
        .split(',')
        .try_for_each(|item| add(item.trim()))
        .map_err(ConfigError::Origin)
}

/// A value `flag` does not take: what it must be.
fn bad_value(flag: &str, value: &str, expected: &'static str) -> ConfigError {
    ConfigError::Flag(FlagError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected,
    })
}

/// `--key-ttl`: seconds, fractions allowed; `0` keeps keys forever (`None`).
fn key_ttl(flag: &str, value: &str) -> Result<Option<Duration>, ConfigError> {
    match value.parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s.is_finite() && s > 0.0 && s <= 100.0 * 365.0 * 86_400.0 => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        _ => Err(bad_value(
            flag,
            value,
            "a number of seconds, 0 (keep forever) or above",
        )),
    }
}

fn number(
    flag: &str,
    value: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| ConfigError::OutOfRange {
            flag: flag.to_string(),
            value: value.to_string(),
            min: *range.start(),
            max: *range.end(),
        })
}

fn millis(flag: &str, value: &str, min: u64) -> Result<Duration, ConfigError> {
    number(flag, value, min..=86_400_000).map(Duration::from_millis)
}

/// Like `seconds`, but 0 is allowed (answer at once).
fn seconds_or_zero(flag: &str, value: &str) -> Result<Duration, ConfigError> {
    match value.parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        _ => seconds(flag, value),
    }
}

fn seconds(flag: &str, value: &str) -> Result<Duration, ConfigError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| bad_value(flag, value, "a number of seconds above 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--print-config` shows every flag, and what it shows of a value flag
    /// reads back as the same setting (none of them lose precision).
    #[test]
    fn every_flag_is_shown_and_what_is_shown_sets_the_same() {
        let config = Config {
            db_password_file: Some(PathBuf::from("pw")),
            ..Config::default()
        };
        for flag in FLAGS {
            let before = shown(&config, flag).unwrap_or_else(|| panic!("{} shown", flag.name));
            if !flag.takes_value || before == "none" {
                continue;
            }
            let mut again = Config::default();
            set(&mut again, flag, &before).unwrap_or_else(|e| panic!("{}: {e}", flag.name));
            assert_eq!(shown(&again, flag).as_ref(), Some(&before), "{}", flag.name);
        }
    }
}
