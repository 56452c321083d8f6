//! A private PostgreSQL for the tests and the bench: `initdb` in a temp folder
//! owned by the `postgres` user (initdb refuses root, and CI runs as root), a
//! server on a free port on 127.0.0.1 with its unix socket in that folder,
//! and databases made on demand. It owns starting, restarting and removing
//! that server, and never touches any other PostgreSQL on the machine.
//!
//! Cleanup: a private server (`PgServer::start`) stops and removes its folder
//! on drop. Statics are never dropped, and a test process may be killed, so
//! every server also has a reaper: a detached shell that waits for the test
//! process to end, then stops the server (`SIGQUIT`, an immediate shutdown)
//! and removes the folder.
//!
//! Where PostgreSQL is not installed, starting fails with one line saying
//! what to install: the PostgreSQL tests never skip silently.
//!
//! Beside it: `signals` (a server frozen, thawed or killed at once) and
//! `standby` (a streaming standby, for the failover tests).

mod signals;
mod standby;

pub use signals::Frozen;

use super::unique_name;
use std::fmt;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The one line a test prints where PostgreSQL is missing.
pub const MISSING: &str =
    "PostgreSQL tests need the postgresql package: apt-get install -y postgresql";

/// The superuser the test server is made with; it logs in over TCP with
/// `PASSWORD` (scram-sha-256), so the service's URLs carry a real password
/// and the tests can check that it is never printed.
pub const USER: &str = "postgres";

/// Why the private server could not be made, started or driven.
#[derive(Debug)]
pub enum PgServerError {
    /// PostgreSQL is not installed (`no_user`: its `postgres` user is
    /// missing); the message is `MISSING`, saying what to install.
    Missing { no_user: bool },
    /// A file, port or process step: what it was, and why it failed.
    Io { doing: String, source: io::Error },
    /// A PostgreSQL program ran and failed: the command and its stderr.
    Failed { command: String, stderr: String },
    /// No port worked: the last attempt's failure and the server's log.
    NoPort {
        last: Box<PgServerError>,
        log: String,
    },
}

impl PgServerError {
    fn io(doing: impl Into<String>) -> impl FnOnce(io::Error) -> PgServerError {
        let doing = doing.into();
        move |source| PgServerError::Io { doing, source }
    }
}

impl fmt::Display for PgServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgServerError::Missing { no_user: false } => f.write_str(MISSING),
            PgServerError::Missing { no_user: true } => write!(f, "{MISSING} (no `{USER}` user)"),
            PgServerError::Io { doing, source } => write!(f, "{doing}: {source}"),
            PgServerError::Failed { command, stderr } => write!(f, "{command} failed: {stderr}"),
            PgServerError::NoPort { last, log } => {
                write!(f, "could not start PostgreSQL: {last}\n{log}")
            }
        }
    }
}

impl std::error::Error for PgServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PgServerError::Io { source, .. } => Some(source),
            PgServerError::NoPort { last, .. } => Some(last.as_ref()),
            _ => None,
        }
    }
}

/// A private PostgreSQL server, stopped and removed on drop.
pub struct PgServer {
    /// Binaries of the newest installed major version.
    bin: PathBuf,
    /// Owned by the `postgres` user; holds `data/`, the socket and the log.
    dir: PathBuf,
    port: u16,
    password: String,
    /// The shell that cleans up if this process dies without dropping us.
    reaper: Option<Child>,
    /// Whether commands run through `runuser -u postgres` (we are root).
    as_postgres: bool,
}

impl PgServer {
    /// One server per test process, started on first use and removed by its
    /// reaper when the process ends. Panics with `MISSING` when PostgreSQL is
    /// not installed.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(|| PgServer::start().unwrap_or_else(|e| panic!("{e}")))
    }

    /// A new server of its own (a test that restarts or stops it).
    pub fn start() -> Result<PgServer, PgServerError> {
        let password = format!("pw-{}", unique_name("s").replace('-', ""));
        let mut server = PgServer::in_new_folder("idem-pg", password)?;
        server.initdb()?;
        server.start_on_a_free_port()?;
        Ok(server)
    }

    /// A server on a new folder of its own, with its reaper; nothing in the
    /// folder yet, nothing started.
    fn in_new_folder(prefix: &str, password: String) -> Result<PgServer, PgServerError> {
        let bin = find_bin_dir().ok_or(PgServerError::Missing { no_user: false })?;
        let as_postgres = running_as_root();
        // Kept by the reaper and by Drop, not by a TempDir: the folder has to
        // outlive this value when the process is killed.
        let dir = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&dir)
            .map_err(PgServerError::io(format!("make {}", dir.display())))?;
        let mut server = PgServer {
            bin,
            dir,
            port: 0,
            password,
            reaper: None,
            as_postgres,
        };
        server.reaper = Some(server.spawn_reaper()?);
        if as_postgres {
            chown_to_postgres(&server.dir)?;
        }
        Ok(server)
    }

    /// The server's folder (data, socket, log), removed with the server.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's password (scram over TCP).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The URL of the `postgres` maintenance database.
    pub fn admin_url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of `dbname` on this server, with the superuser's password.
    pub fn url_for(&self, dbname: &str) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/{dbname}",
            self.password, self.port
        )
    }

    /// A new empty database named `{prefix}_{unique}`; its URL.
    pub fn fresh_database(&self, prefix: &str) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{}_{}_{}",
            prefix.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        )
        .to_lowercase();
        let mut admin = self.connect_admin();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        self.url_for(&name)
    }

    /// A plain connection to `postgres` for a test's own queries.
    pub fn connect_admin(&self) -> postgres::Client {
        connect(&self.admin_url())
    }

    /// `pg_ctl restart -m immediate`: every connection dies at once, as in a
    /// crash; the server comes back on the same port with the same data.
    pub fn restart_immediate(&self) -> Result<(), PgServerError> {
        self.pg_ctl(&["restart", "-m", "immediate", "-w", "-t", "60"])
    }

    /// `pg_ctl stop -m immediate`: the server is down until `start_again`.
    pub fn stop_immediate(&self) -> Result<(), PgServerError> {
        self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "60"])
    }

    /// Start a stopped server again on the same port.
    pub fn start_again(&self) -> Result<(), PgServerError> {
        self.pg_ctl(&["start", "-w", "-t", "60"])
    }

    /// `ALTER SYSTEM SET name = value` and a reload: a setting that
    /// survives restarts.
    pub fn set(&self, name: &str, value: &str) {
        let mut admin = self.connect_admin();
        // Two statements: ALTER SYSTEM refuses to run in a transaction block.
        for statement in [
            format!("ALTER SYSTEM SET {name} = '{value}'"),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            admin
                .batch_execute(&statement)
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    /// Write `contents` to `name` in the server's data folder, owned by the
    /// server's user with `mode` (a test's TLS key and certificate; the
    /// server refuses a key others can read).
    pub fn install_file(
        &self,
        name: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), PgServerError> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.data().join(name);
        std::fs::write(&path, contents).map_err(PgServerError::io(format!("write {name}")))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(PgServerError::io(format!("chmod {name}")))?;
        if self.as_postgres {
            chown_to_postgres(&path)?;
        }
        Ok(())
    }

    /// The server's log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn initdb(&self) -> Result<(), PgServerError> {
        let pwfile = self.dir.join("pwfile");
        std::fs::write(&pwfile, &self.password).map_err(PgServerError::io("write pwfile"))?;
        if self.as_postgres {
            chown_to_postgres(&pwfile)?;
        }
        let data = self.data();
        let outcome = self
            .command("initdb")
            .args(["-D", path_str(&data), "-U", USER, "-E", "UTF8"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", path_str(&pwfile)))
            // The test server's files need not survive a machine crash.
            .arg("--no-sync")
            .stdin(Stdio::null())
            .output()
            .map_err(PgServerError::io("run initdb"))?;
        let _ = std::fs::remove_file(&pwfile);
        if !outcome.status.success() {
            return Err(PgServerError::Failed {
                command: "initdb".into(),
                stderr: String::from_utf8_lossy(&outcome.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Pick a free port and start there; another process may take the port
    /// between our probe and the server's bind, so try a few.
    fn start_on_a_free_port(&mut self) -> Result<(), PgServerError> {
        let mut last = None;
        for _ in 0..5 {
            self.port = free_port()?;
            self.write_settings()?;
            match self.start_again() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(PgServerError::NoPort {
            last: Box::new(last.expect("the loop ran and every start failed")),
            log: self.log(),
        })
    }

    /// Settings in `postgresql.auto.conf`, so a restart keeps them.
    ///
    /// `fsync = off` for this TEST server only: the service's durability is
    /// about the order of its commits and answers (nothing answered before
    /// its COMMIT returned), which the server's fsync does not change; losing
    /// the OS cache only matters on a machine crash, which no test makes. It
    /// keeps ~7 concurrent builds on one disk from waiting on each other.
    fn write_settings(&self) -> Result<(), PgServerError> {
        let settings = format!(
            "port = {}\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\n\
             fsync = off\n\
             full_page_writes = off\n\
             max_connections = 300\n\
             shared_buffers = '32MB'\n\
             log_min_messages = warning\n",
            self.port,
            path_str(&self.dir)
        );
        let file = self.data().join("postgresql.auto.conf");
        // A standby's link to its primary (`pg_basebackup -R` wrote it) stays.
        let kept: String = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.starts_with("primary_conninfo"))
            .map(|line| format!("{line}\n"))
            .collect();
        let settings = settings + &kept;
        std::fs::write(&file, settings).map_err(PgServerError::io("write settings"))?;
        if self.as_postgres {
            chown_to_postgres(&file)?;
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), PgServerError> {
        let log = self.dir.join("log");
        let outcome = self
            .command("pg_ctl")
            .args(["-D", path_str(&self.data()), "-l", path_str(&log)])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(PgServerError::io("run pg_ctl"))?;
        if outcome.status.success() {
            Ok(())
        } else {
            Err(PgServerError::Failed {
                command: format!("pg_ctl {}", args.join(" ")),
                stderr: String::from_utf8_lossy(&outcome.stderr).trim().to_string(),
            })
        }
    }

    /// A PostgreSQL binary, run as the `postgres` user when we are root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", USER, "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// A detached shell (its own session, so a signal to our process group
    /// does not take it along) that outlives this process by at most a
    /// second: then it stops the server and removes the folder.
    fn spawn_reaper(&self) -> Result<Child, PgServerError> {
        let script = r#"
            while kill -0 "$1" 2>/dev/null; do sleep 1; done
            pid=$(head -n 1 "$2/data/postmaster.pid" 2>/dev/null)
            # A frozen server (a test's SIGSTOP) must run to see the stop; its
            # children called setsid(), so each is found by its parent pid.
            if [ -n "$pid" ]; then
                for stat in /proc/[0-9]*/stat; do
                    read -r child _ _ parent _ 2>/dev/null <"$stat" || continue
                    [ "$parent" = "$pid" ] && kill -CONT "$child" 2>/dev/null
                done
                kill -CONT "$pid" 2>/dev/null
            fi
            [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                [ -e "$2/data/postmaster.pid" ] || break
                sleep 0.5
            done
            rm -rf "$2"
        "#;
        Command::new("setsid")
            .args(["sh", "-c", script, "reaper"])
            .arg(std::process::id().to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(PgServerError::io("spawn the reaper"))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A stopped (frozen) server would never see the stop signal.
        let _ = self.signal_all(nix::sys::signal::Signal::SIGCONT);
        let _ = self.stop_immediate();
        if let Some(mut reaper) = self.reaper.take() {
            let _ = reaper.kill();
            let _ = reaper.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Connect with the plain client (no TLS), retrying for a few seconds: the
/// server may have just been restarted. The session's `search_path` is the
/// service's default schema, then `public`: a test reads the service's
/// tables by their names, and makes its own where they always were.
pub fn connect(url: &str) -> postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connected = postgres::Client::connect(url, postgres::NoTls).and_then(|mut client| {
            let schema = crate::store::DEFAULT_DB_SCHEMA;
            client.batch_execute(&format!("SET search_path = {schema}, public"))?;
            Ok(client)
        });
        match connected {
            Ok(client) => return client,
            Err(e) if Instant::now() > deadline => panic!("connect to the test PostgreSQL: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// `/usr/lib/postgresql/<newest>/bin`, if it has `initdb`.
fn find_bin_dir() -> Option<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn running_as_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn chown_to_postgres(path: &Path) -> Result<(), PgServerError> {
    let user = nix::unistd::User::from_name(USER)
        .ok()
        .flatten()
        .ok_or(PgServerError::Missing { no_user: true })?;
    std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .map_err(PgServerError::io(format!("chown {}", path.display())))
}

fn free_port() -> Result<u16, PgServerError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(PgServerError::io("find a free port"))
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8 here")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness gives each caller its own empty database on one server,
    /// with password authentication, and a private server survives an
    /// immediate restart with its data.
    #[test]
    fn fresh_databases_are_separate_and_survive_a_restart() {
        let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
        let (a, b) = (server.fresh_database("h"), server.fresh_database("h"));
        assert_ne!(a, b);
        let mut conn = connect(&a);
        conn.batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
            .unwrap();
        let mut other = connect(&b);
        assert!(other.query("SELECT * FROM t", &[]).is_err());
        let wrong = a.replace(server.password(), "wrong");
        assert!(postgres::Client::connect(&wrong, postgres::NoTls).is_err());
        server.restart_immediate().unwrap();
        assert!(conn.query("SELECT 1", &[]).is_err(), "the old session died");
        let mut again = connect(&a);
        let x: i32 = again.query_one("SELECT x FROM t", &[]).unwrap().get(0);
        assert_eq!(x, 7);
        let dir = server.dir.clone();
        drop(server);
        assert!(!dir.exists());
    }
}
