//! Temporary folders for the tests and the bench: a folder with a name no
//! other run uses, removed with everything in it on drop, even when a test
//! fails. The service itself never uses this module.

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
}
