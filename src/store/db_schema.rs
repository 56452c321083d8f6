//! `--db-schema NAME`: the PostgreSQL schema that holds every table,
//! sequence and index of one deployment, so that two deployments can share
//! one database. A name is checked here, once, so the wing can put it into
//! SQL and a session's `search_path` without quoting: lower-case letters,
//! digits and `_`, not starting with a digit, and not `pg_…` (PostgreSQL
//! reserves those) or `information_schema`.
//!
//! Plain values only: this file never connects to anything. (SQLite has no
//! schemas; a SQLite `--db` ignores the name.)

use std::fmt;

/// The schema a deployment uses unless told otherwise.
pub const DEFAULT_DB_SCHEMA: &str = "idempotent_tool";

/// The longest name: the wake-up channel is `<schema>_wake`, and a channel
/// name must stay under PostgreSQL's 63 bytes.
pub const MAX_DB_SCHEMA_LEN: usize = 48;

/// What `DbSchema::parse` requires, said to whoever gave another name.
pub const DB_SCHEMA_RULE: &str = "a schema name: 1 to 48 of a-z, 0-9 and _, \
     not starting with a digit or pg_, not information_schema";

/// A checked schema name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbSchema(Box<str>);

impl DbSchema {
    /// `name` if it follows `DB_SCHEMA_RULE`.
    pub fn parse(name: &str) -> Option<DbSchema> {
        let first_ok = name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_');
        let rest_ok = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let reserved = name.starts_with("pg_") || name == "information_schema";
        (first_ok && rest_ok && !reserved && name.len() <= MAX_DB_SCHEMA_LEN)
            .then(|| DbSchema(name.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `LISTEN`/`NOTIFY` channel of this schema's nodes: deployments
    /// sharing a database do not wake each other.
    pub fn wake_channel(&self) -> String {
        format!("{}_wake", self.0)
    }
}

impl Default for DbSchema {
    fn default() -> Self {
        DbSchema(DEFAULT_DB_SCHEMA.into())
    }
}

impl fmt::Display for DbSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lower_case_names_that_postgres_does_not_reserve() {
        for good in [
            "idempotent_tool",
            "public",
            "_x",
            "team_a2",
            &"a".repeat(MAX_DB_SCHEMA_LEN),
        ] {
            assert_eq!(
                DbSchema::parse(good).map(|s| s.to_string()).as_deref(),
                Some(good)
            );
        }
        for bad in [
            "",
            "Idem",
            "1st",
            "a-b",
            "a b",
            "a.b",
            "x\"y",
            "pg_temp",
            "pg_catalog",
            "information_schema",
            "é",
            &"a".repeat(MAX_DB_SCHEMA_LEN + 1),
        ] {
            assert_eq!(DbSchema::parse(bad), None, "{bad:?}");
        }
        assert_eq!(DbSchema::default().wake_channel(), "idempotent_tool_wake");
    }
}
