//! Which database a `--db` value names: a `postgres://` or `postgresql://`
//! URL (libpq style: user, password, host, port, dbname, `sslmode`,
//! `application_name`, ..., several hosts as `h1:5432,h2:5433`) is a
//! PostgreSQL database; anything else is the path of a SQLite file, as it
//! always was. A multi-host URL is also kept as one configuration per host,
//! for the store to try each in turn with a deadline of its own.
//!
//! It owns parsing and printing that value, and must never print a password:
//! `Display` of a `PgTarget` (and so of a `Database`) masks it, and a parse
//! error names the URL only masked.

use super::db_schema::DbSchema;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

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

/// libpq's `sslmode`, with the verification each promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is not verified.
    Require,
    /// TLS; the certificate chains to a trusted root (any host name).
    VerifyCa,
    /// TLS; the certificate chains to a trusted root and names the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            // libpq's `allow` tries without TLS first; nothing here is gained
            // by that order, so it is taken as `prefer`.
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// A PostgreSQL database: the parsed connection settings (with the password)
/// and the URL to print (without it).
#[derive(Clone)]
pub struct PgTarget {
    /// The whole URL, every host: what `verify` connects with. Boxed: a
    /// `Database` is passed around by value, and the SQLite variant should
    /// not carry PostgreSQL's 300 bytes.
    config: Box<tokio_postgres::Config>,
    /// One configuration per host of a multi-host URL
    /// (`postgres://h1:5432,h2:5433/db`), in the URL's order; the whole
    /// URL's alone for one host. The store connects to each in turn with a
    /// deadline of its own, so one host that accepts TCP and then never
    /// answers (frozen) cannot keep it from the next.
    hosts: Vec<tokio_postgres::Config>,
    ssl_mode: SslMode,
    masked: String,
    /// Where the service's tables are (`--db-schema`): every session starts
    /// with it as its `search_path`, after the URL's own `options`.
    schema: DbSchema,
}

impl PgTarget {
    pub fn is_url(value: &str) -> bool {
        value.starts_with("postgres://") || value.starts_with("postgresql://")
    }

    /// Parse a `postgres://user:password@host:port/dbname?sslmode=...` URL;
    /// several hosts as `host1:port1,host2:port2`.
    pub fn parse(url: &str) -> Result<PgTarget, DatabaseUrlError> {
        let masked = mask_password(url);
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut ssl_mode = SslMode::Prefer;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", value)) => {
                    ssl_mode = SslMode::parse(value).ok_or_else(|| DatabaseUrlError::SslMode {
                        masked: masked.clone(),
                        value: value.to_string(),
                    })?
                }
                _ => kept.push(pair),
            }
        }
        let base = encode_at_signs_in_userinfo(base);
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let parse = |url: &str| {
            let mut config =
                tokio_postgres::Config::from_str(url).map_err(|e| DatabaseUrlError::NotAUrl {
                    masked: masked.clone(),
                    reason: e.to_string(),
                })?;
            config.ssl_mode(match ssl_mode {
                SslMode::Disable => tokio_postgres::config::SslMode::Disable,
                SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                _ => tokio_postgres::config::SslMode::Require,
            });
            if config.get_application_name().is_none() {
                config.application_name("idempotent-tool");
            }
            Ok(config)
        };
        let config = parse(&rest)?;
        if config.get_user().is_none() {
            return Err(DatabaseUrlError::NoUser { masked });
        }
        let hosts = match one_url_per_host(&rest) {
            Some(urls) => urls.iter().map(|u| parse(u)).collect::<Result<_, _>>()?,
            None => vec![config.clone()],
        };
        let mut target = PgTarget {
            config: Box::new(config),
            hosts,
            ssl_mode,
            masked,
            schema: DbSchema::default(),
        };
        target.set_schema(&DbSchema::default());
        Ok(target)
    }

    /// The whole URL's settings, every host (the bench's bulk loader's one
    /// connection).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// One configuration per host, in the URL's order.
    pub(super) fn hosts(&self) -> &[tokio_postgres::Config] {
        &self.hosts
    }

    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    /// The schema that holds the service's tables.
    pub fn schema(&self) -> &DbSchema {
        &self.schema
    }

    /// Keep the service's tables in `schema`: each session's `search_path`
    /// is set to it alone at connection (a start-up option, so no statement
    /// runs before it), and nothing the service names resolves elsewhere.
    pub fn set_schema(&mut self, schema: &DbSchema) {
        let set_last = format!("-c search_path={}", self.schema);
        let search_path = format!("-c search_path={schema}");
        // The whole URL's settings and each host's (a multi-host URL).
        for config in std::iter::once(self.config.as_mut()).chain(self.hosts.iter_mut()) {
            // The URL's own options are what precedes the search path set last.
            let current = config.get_options().unwrap_or("");
            let own = current
                .strip_suffix(set_last.as_str())
                .unwrap_or(current)
                .trim_end();
            let options = match own {
                "" => search_path.clone(),
                own => format!("{own} {search_path}"),
            };
            config.options(&options);
        }
        self.schema = schema.clone();
    }

    pub fn dbname(&self) -> Option<&str> {
        self.config.get_dbname()
    }

    /// Whether the URL itself gives a password.
    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some()
    }

    /// Connect with `password` (read from a secret file: `--db-password-file`);
    /// the printed URL stays as it was, without it.
    pub fn set_password(&mut self, password: &[u8]) {
        self.config.password(password);
        for host in &mut self.hosts {
            host.password(password);
        }
    }
}

/// For a URL naming several hosts in its authority
/// (`postgres://u:p@h1:5432,h2:5433/db?...`), the same URL once per host;
/// `None` for one host (or hosts given only as a `host=` parameter, which
/// the client then tries in order within one deadline).
fn one_url_per_host(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    if !hosts.contains(',') {
        return None;
    }
    Some(
        hosts
            .split(',')
            .map(|host| format!("{scheme}://{userinfo}{host}{tail}"))
            .collect(),
    )
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked)
    }
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgTarget({})", self.masked)
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

/// The URL with every `@` of its user part but the last percent-encoded: a
/// host never contains `@`, so the last one ends the user part, and a
/// password such as `p@ss` means what its writer meant (the PostgreSQL client
/// splits at the first `@` and would look up `ss@host` as the host).
fn encode_at_signs_in_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            format!("{scheme}://{}@{host}{tail}", userinfo.replace('@', "%40"))
        }
        None => url.to_string(),
    }
}

/// The URL with the password in its user part, and any `password=` query
/// parameter, replaced by `***`.
fn mask_password(url: &str) -> String {
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
    fn the_password_never_prints() {
        let url = "postgres://idem:s3cr%40t@db.example:6432/calls?sslmode=verify-full&password=other&application_name=n1";
        let target = PgTarget::parse(url).unwrap();
        for printed in [
            target.to_string(),
            format!("{target:?}"),
            Database::Postgres(target.clone()).to_string(),
            format!("{:?}", Database::Postgres(target.clone())),
        ] {
            assert!(!printed.contains("s3cr"), "{printed}");
            assert!(!printed.contains("other"), "{printed}");
            assert!(
                printed.contains("idem:***@db.example:6432/calls"),
                "{printed}"
            );
        }
        assert_eq!(target.ssl_mode(), SslMode::VerifyFull);
        assert_eq!(target.dbname(), Some("calls"));
        assert_eq!(target.config().get_application_name(), Some("n1"));
        let bad = PgTarget::parse("postgres://idem:s3cr@h/db?sslmode=maybe")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("sslmode") && !bad.contains("s3cr"), "{bad}");
        let bad = PgTarget::parse("postgres://idem:s3cr@h:notaport/db")
            .unwrap_err()
            .to_string();
        assert!(!bad.contains("s3cr"), "{bad}");
    }

    /// Every session's `search_path` is the schema, set after the URL's own
    /// `options` so it wins; the default schema until told otherwise.
    #[test]
    fn the_schema_is_each_sessions_search_path() {
        let mut target = PgTarget::parse("postgres://u@h/db").unwrap();
        assert_eq!(target.schema().as_str(), "idempotent_tool");
        assert_eq!(
            target.config().get_options(),
            Some("-c search_path=idempotent_tool")
        );
        let url = "postgres://u@h/db?options=-c%20work_mem%3D8MB";
        let mut db = Database::parse(url).unwrap();
        db.set_schema(&DbSchema::parse("team_a").unwrap());
        db.set_schema(&DbSchema::parse("team_b").unwrap());
        let Database::Postgres(target_b) = &db else {
            panic!("a URL")
        };
        assert_eq!(
            target_b.config().get_options(),
            Some("-c work_mem=8MB -c search_path=team_b")
        );
        target.set_schema(&DbSchema::parse("public").unwrap());
        assert_eq!(target.schema().as_str(), "public");
        let mut two = PgTarget::parse("postgres://u@h1:5432,h2:5433/db").unwrap();
        two.set_schema(&DbSchema::parse("team_c").unwrap());
        assert_eq!(two.hosts().len(), 2);
        for host in two.hosts() {
            assert_eq!(
                host.get_options(),
                Some("-c search_path=team_c"),
                "every host"
            );
        }
    }

    #[test]
    fn an_at_sign_in_the_password_is_part_of_the_password() {
        let target = PgTarget::parse("postgres://idem:p@ss@w0rd@db.example:6432/calls").unwrap();
        assert_eq!(target.config().get_password(), Some(&b"p@ss@w0rd"[..]));
        assert_eq!(target.config().get_user(), Some("idem"));
        let hosts = format!("{:?}", target.config().get_hosts());
        assert!(
            hosts.contains("db.example") && !hosts.contains('@'),
            "{hosts}"
        );
        assert_eq!(target.dbname(), Some("calls"));
        assert_eq!(
            target.to_string(),
            "postgres://idem:***@db.example:6432/calls"
        );
        let encoded = PgTarget::parse("postgres://idem:p%40ss@h/db").unwrap();
        assert_eq!(encoded.config().get_password(), Some(&b"p@ss"[..]));
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

    #[test]
    fn defaults_are_filled_in() {
        let target = PgTarget::parse("postgres://u@h/db").unwrap();
        assert_eq!(target.ssl_mode(), SslMode::Prefer);
        assert_eq!(
            target.config().get_application_name(),
            Some("idempotent-tool")
        );
        assert_eq!(target.config().get_connect_timeout(), None);
        assert_eq!(target.hosts().len(), 1);
        let given = PgTarget::parse("postgres://u@h/db?connect_timeout=7").unwrap();
        assert_eq!(
            given.hosts()[0].get_connect_timeout(),
            Some(&std::time::Duration::from_secs(7))
        );
    }

    /// A multi-host URL (failover): one configuration per host, in order,
    /// each with the URL's user, password, database and parameters; the
    /// password masked in print; a password file reaches every host.
    #[test]
    fn a_multi_host_url_is_one_configuration_per_host() {
        let url = "postgres://idem:s3cr@10.0.0.1:5432,db2.example:5433/calls\
                   ?target_session_attrs=read-write&sslmode=require&application_name=n1";
        let mut target = PgTarget::parse(url).unwrap();
        assert_eq!(
            target.to_string(),
            "postgres://idem:***@10.0.0.1:5432,db2.example:5433/calls\
             ?target_session_attrs=read-write&sslmode=require&application_name=n1"
        );
        let hosts: Vec<(String, Vec<u16>)> = target
            .hosts()
            .iter()
            .map(|c| match c.get_hosts() {
                [tokio_postgres::config::Host::Tcp(h)] => (h.clone(), c.get_ports().to_vec()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            hosts,
            [
                ("10.0.0.1".to_string(), vec![5432]),
                ("db2.example".to_string(), vec![5433])
            ]
        );
        for host in target.hosts() {
            assert_eq!(host.get_user(), Some("idem"));
            assert_eq!(host.get_password(), Some(&b"s3cr"[..]));
            assert_eq!(host.get_dbname(), Some("calls"));
            assert_eq!(host.get_application_name(), Some("n1"));
            assert_eq!(
                host.get_target_session_attrs(),
                tokio_postgres::config::TargetSessionAttrs::ReadWrite
            );
            assert_eq!(
                host.get_ssl_mode(),
                tokio_postgres::config::SslMode::Require
            );
        }
        assert_eq!(target.config().get_hosts().len(), 2);
        target.set_password(b"from-file");
        assert!(target
            .hosts()
            .iter()
            .all(|h| h.get_password() == Some(&b"from-file"[..])));
        let one = PgTarget::parse("postgres://u@[::1]:5432/db").unwrap();
        assert_eq!(one.hosts().len(), 1);
    }
}
