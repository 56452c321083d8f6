//! Temporary folders and databases for the tests and the bench: a folder with
//! a name no other run uses, removed with everything in it on drop, even when
//! a test fails; and `TempDb`, the one temp-database helper of the unit tests
//! and the integration tests alike. The service itself never uses this module;
//! making a folder here tells the log that this is a test process
//! (`log::capture_for_tests`), so service logs stay out of a green test run.
//! `postgres` is a private PostgreSQL server for the same tests, built only
//! with the `testing` feature (the tests'), so the service's binary never
//! carries an installer.

#[cfg(any(test, feature = "testing"))]
pub mod postgres;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A unique folder, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new folder under the system's temp folder, named `{prefix}-{unique}`.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// A new folder under `parent`.
    pub fn new_in(parent: &Path, prefix: &str) -> std::io::Result<TempDir> {
        // Tests make these: their service logs go through the test harness's
        // capture, shown only if a test fails. (A bench without the `testing`
        // feature logs where it chose to.)
        #[cfg(any(test, feature = "testing"))]
        crate::log::capture_for_tests();
        let path = parent.join(unique_name(prefix));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the folder.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A database file in a temp folder of its own: the one temp database of every
/// test, unit and integration alike. On drop the file goes, with its `-wal`,
/// `-shm` and `-journal`, and the folder with them when this `TempDb` made it.
#[derive(Debug)]
pub struct TempDb {
    /// The database file (created by whoever opens it first).
    pub path: PathBuf,
    /// The folder holding it, when this `TempDb` made one.
    _dir: Option<TempDir>,
}

impl TempDb {
    /// `idem.db` in a new folder `{prefix}-{unique}` under the system's temp
    /// folder. Panics when the folder cannot be made: no test can go on
    /// without it.
    pub fn new(prefix: &str) -> TempDb {
        let dir =
            TempDir::new(prefix).unwrap_or_else(|e| panic!("make a temp folder for {prefix}: {e}"));
        TempDb {
            path: dir.join("idem.db"),
            _dir: Some(dir),
        }
    }

    /// A database at `path`, in a folder someone else owns (a mounted file
    /// system): only its files are removed on drop.
    pub fn at(path: PathBuf) -> TempDb {
        TempDb { path, _dir: None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as text, for a command line.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8 here")
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = self.path.clone().into_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
}

/// `{prefix}-{pid}-{nanoseconds}-{counter}`: unique across processes and
/// within one.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_dir_is_unique_and_removed_on_drop() {
        let (a, b) = (TempDir::new("t").unwrap(), TempDir::new("t").unwrap());
        assert_ne!(a.path(), b.path());
        std::fs::write(a.join("file"), b"x").unwrap();
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
    }

    #[test]
    fn a_temp_db_removes_its_files_and_only_its_own_folder() {
        let made = TempDb::new("t");
        let folder = made.path().parent().unwrap().to_path_buf();
        std::fs::write(&made.path, b"x").unwrap();
        drop(made);
        assert!(!folder.exists());
        let owner = TempDir::new("t").unwrap();
        let inside = TempDb::at(owner.join("idem.db"));
        std::fs::write(&inside.path, b"x").unwrap();
        std::fs::write(owner.join("idem.db-wal"), b"x").unwrap();
        drop(inside);
        assert!(!owner.join("idem.db").exists());
        assert!(!owner.join("idem.db-wal").exists());
        assert!(owner.path().exists());
    }
}
