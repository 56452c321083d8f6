//! A streaming standby of a test server, for the failover tests:
//! `pg_basebackup -R` (the distribution's own binary) copies the primary into
//! a folder of its own and writes `primary_conninfo` and `standby.signal`;
//! the standby starts on a free port on 127.0.0.1 like any test server, with
//! the same superuser and password, and is removed on drop the same way.
//! `promote` makes it a primary (`pg_ctl promote`).
//!
//! It never changes the primary but through `set`, which its caller names.

use super::{path_str, PgServer, PgServerError, USER};
use std::process::Stdio;
use std::time::{Duration, Instant};

impl PgServer {
    /// A standby streaming from this server: its data as of now, then
    /// every commit streamed. Synchronous once this server is told so
    /// (`set("synchronous_standby_names", "*")`, after this returns: the
    /// standby must not inherit the setting, or once promoted it would wait
    /// for a standby of its own).
    pub fn start_standby(&self) -> Result<PgServer, PgServerError> {
        let mut standby = PgServer::in_new_folder("idem-pg-standby", self.password.clone())?;
        let source = format!(
            "host=127.0.0.1 port={} user={USER} password={}",
            self.port, self.password
        );
        let data = standby.data();
        let outcome = standby
            .command("pg_basebackup")
            .args(["-D", path_str(&data), "-R", "-X", "stream", "-c", "fast"])
            .args(["-d", &source])
            .stdin(Stdio::null())
            .output()
            .map_err(PgServerError::io("run pg_basebackup"))?;
        if !outcome.status.success() {
            return Err(PgServerError::Failed {
                command: "pg_basebackup".into(),
                stderr: String::from_utf8_lossy(&outcome.stderr).trim().to_string(),
            });
        }
        standby.start_on_a_free_port()?;
        Ok(standby)
    }

    /// Wait until a standby streams from this server (`sync`: as its
    /// synchronous standby, so every commit waits for it).
    pub fn wait_for_standby(&self, sync: bool) -> Result<(), PgServerError> {
        let wanted = if sync { "sync" } else { "async" };
        let mut admin = self.connect_admin();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let streaming: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication
                      WHERE state = 'streaming' AND sync_state = $1",
                    &[&wanted],
                )
                .map(|row| row.get(0))
                .unwrap_or(0);
            if streaming > 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PgServerError::Failed {
                    command: format!("wait for a {wanted} standby"),
                    stderr: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `pg_ctl promote -w`: this standby becomes a primary and accepts
    /// writes when it returns.
    pub fn promote(&self) -> Result<(), PgServerError> {
        self.pg_ctl(&["promote", "-w", "-t", "60"])
    }
}
