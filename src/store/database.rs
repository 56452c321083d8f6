//! Which database a `--db` value names: a `postgres://` or `postgresql://`
//! URL is a PostgreSQL database (its settings parsed by the PostgreSQL wing
//! into a `PgTarget`, `postgres/target.rs`); another `scheme://` is refused;
//! anything else is the path of a SQLite file, as it always was.
//!
//! It owns choosing between them and printing the value, and must never
//! print a password: `Display` of a `Database` masks it, and a parse error
//! names the URL only masked. It names no database driver.

use super::db_schema::DbSchema;
use super::PgTarget;
use std::fmt;
use std::path::{Path, PathBuf};

/// The database the store opens.
#[derive(Clone)]
pub enum Database {
    Sqlite(PathBuf),
    Postgres(PgTarget),
}

/// Why a `--db` value names no usable PostgreSQL database. Each variant holds
/// the URL with its password masked, never the URL as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrlError {
    /// `sslmode=` names no mode this service knows.
    SslMode { masked: String, value: String },
    /// The PostgreSQL client cannot read the URL: its reason, as text (the
    /// client's error is neither `Clone` nor comparable, which flag errors are).
    NotAUrl { masked: String, reason: String },
    /// The URL names no user to connect as.
    NoUser { masked: String },
    /// A `scheme://` other than PostgreSQL's (a misspelling such as
    /// `postgress://` must not become a SQLite file of that name).
    UnknownScheme { masked: String, scheme: String },
}

impl fmt::Display for DatabaseUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrlError::SslMode { masked, value } => write!(
                f,
                "{masked}: sslmode must be disable, prefer, require, verify-ca \
                 or verify-full, not {value:?}"
            ),
            DatabaseUrlError::NotAUrl { masked, reason } => write!(
                f,
                "{masked} is not a PostgreSQL URL: {reason} (in the user, password or \
                 database name, write / ? # % as %2F %3F %23 %25)"
            ),
            DatabaseUrlError::UnknownScheme { masked, scheme } => write!(
                f,
                "{masked}: {scheme:?} is not a database scheme; a PostgreSQL URL starts \
                 postgres:// or postgresql://, and a SQLite file's path has no \"://\""
            ),
            DatabaseUrlError::NoUser { masked } => write!(f, "{masked}: the URL names no user"),
        }
    }
}

impl std::error::Error for DatabaseUrlError {}
impl Database {
    /// A `--db` value: a PostgreSQL URL, or a SQLite file's path.
    pub fn parse(value: &str) -> Result<Database, DatabaseUrlError> {
        if PgTarget::is_url(value) {
            PgTarget::parse(value).map(Database::Postgres)
        } else if let Some(scheme) = url_scheme(value) {
            Err(DatabaseUrlError::UnknownScheme {
                masked: mask_password(value),
                scheme: scheme.to_string(),
            })
        } else {
            Ok(Database::Sqlite(PathBuf::from(value)))
        }
    }

    /// The SQLite file, if this is one (the tests and tools that open it).
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(path) => Some(path),
            Database::Postgres(_) => None,
        }
    }

    /// PostgreSQL: keep every table in `schema` (`--db-schema`). SQLite has
    /// no schemas, and a file is left as it is.
    pub fn set_schema(&mut self, schema: &DbSchema) {
        if let Database::Postgres(target) = self {
            target.set_schema(schema);
        }
    }
}

impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(target) => target.fmt(f),
        }
    }
}

/// Masked like `Display`: a `{:?}` in a log line must not leak either.
impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "Sqlite({})", path.display()),
            Database::Postgres(target) => write!(f, "Postgres({target})"),
        }
    }
}

/// What `CallStore::open` takes: a `Database`, or a SQLite file's path as
/// before PostgreSQL existed (`&Path`, `&PathBuf`).
pub trait DatabaseRef {
    fn to_database(&self) -> Database;
}

impl DatabaseRef for Database {
    fn to_database(&self) -> Database {
        self.clone()
    }
}

impl DatabaseRef for Path {
    fn to_database(&self) -> Database {
        Database::Sqlite(self.to_path_buf())
    }
}

impl DatabaseRef for PathBuf {
    fn to_database(&self) -> Database {
        Database::Sqlite(self.clone())
    }
}

impl From<&Path> for Database {
    fn from(path: &Path) -> Database {
        Database::Sqlite(path.to_path_buf())
    }
}

impl From<&PathBuf> for Database {
    fn from(path: &PathBuf) -> Database {
        Database::Sqlite(path.clone())
    }
}

impl From<PathBuf> for Database {
    fn from(path: PathBuf) -> Database {
        Database::Sqlite(path)
    }
}

impl From<PgTarget> for Database {
    fn from(target: PgTarget) -> Database {
        Database::Postgres(target)
    }
}

/// The scheme of a `scheme://...` value (RFC 3986: a letter, then letters,
/// digits, `+`, `-`, `.`), or `None` for anything else, which is a path.
fn url_scheme(value: &str) -> Option<&str> {
    let (scheme, _) = value.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first_is_letter = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
    let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    (first_is_letter && rest_ok).then_some(scheme)
}

/// The URL with the password in its user part, and any `password=` query
/// parameter, replaced by `***`.
pub(super) fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_selects_postgres_and_anything_else_is_a_file() {
        for url in [
            "postgres://u@h/db",
            "postgresql://u:p@h:5433/db?sslmode=require",
        ] {
            assert!(
                matches!(Database::parse(url), Ok(Database::Postgres(_))),
                "{url}"
            );
        }
        for path in [
            "idem.db",
            "/tmp/postgres/x.db",
            "postgres.db",
            "./postgres:/x",
        ] {
            let db = Database::parse(path).unwrap();
            assert_eq!(db.sqlite_path(), Some(Path::new(path)));
        }
    }

    #[test]
    fn another_scheme_is_refused_not_taken_for_a_file_name() {
        for value in [
            "postgress://u:secret@h/db",
            "mysql://u@h/db",
            "file:///tmp/x.db",
        ] {
            let error = Database::parse(value).unwrap_err().to_string();
            assert!(error.contains("postgres://"), "{value}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
        for path in ["idem.db", "./postgres:/x", "dir/a://b"] {
            assert!(
                matches!(Database::parse(path), Ok(Database::Sqlite(_))),
                "{path}"
            );
        }
    }
}
