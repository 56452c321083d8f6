//! `--log-file PATH`: the log appended to a file, and opened again by its
//! path on request (`SIGHUP`), so that logrotate can rename the file and
//! signal — no `copytruncate`, which loses the lines written between its copy
//! and its truncation.
//!
//! Every write (an event line, or a whole buffer of access lines) is one
//! `write_all` under the file's lock, and `reopen` swaps the file under the
//! same lock: each line lands whole in exactly one file, the renamed one or
//! the new one. If the path cannot be opened again, the old file is kept and
//! the caller is told. It never decides what a line says.

use crate::lock::lock;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A log file, reopened by path on request.
pub struct LogFile {
    /// `None`: a file handed over already open (the bench's), never reopened.
    path: Option<PathBuf>,
    file: Mutex<File>,
}

impl LogFile {
    /// Open `path` for appending, created readable by its owner and group
    /// only (a log names tenants and keys).
    pub fn open(path: &Path) -> io::Result<LogFile> {
        Ok(LogFile {
            path: Some(path.to_path_buf()),
            file: Mutex::new(open_for_append(path)?),
        })
    }

    /// A file already open, which `reopen` leaves alone.
    pub fn from_file(file: File) -> LogFile {
        LogFile {
            path: None,
            file: Mutex::new(file),
        }
    }

    pub fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        lock(&self.file).write_all(bytes)
    }

    /// Open the path again and write there from now on: `Ok(false)` for a
    /// file without a path. On an error the old file is kept.
    pub fn reopen(&self) -> io::Result<bool> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let fresh = open_for_append(path)?;
        *lock(&self.file) = fresh;
        Ok(true)
    }
}

fn open_for_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

/// The access writer's sink: the same file, through the same lock.
pub struct LogFileWriter(pub Arc<LogFile>);

impl Write for LogFileWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.write_all(bytes).map(|()| bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDir;

    #[test]
    fn a_renamed_file_keeps_what_was_written_and_reopen_starts_a_new_one() {
        let dir = TempDir::new("log-file").unwrap();
        let path = dir.path().join("service.log");
        let log = LogFile::open(&path).unwrap();
        log.write_all(b"one\n").unwrap();
        std::fs::rename(&path, dir.path().join("service.log.1")).unwrap();
        log.write_all(b"two\n").unwrap();
        assert!(log.reopen().unwrap());
        log.write_all(b"three\n").unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read("service.log.1"), "one\ntwo\n");
        assert_eq!(read("service.log"), "three\n");
    }

    #[test]
    fn a_path_that_cannot_be_opened_again_keeps_the_old_file() {
        let dir = TempDir::new("log-file-gone").unwrap();
        let sub = dir.path().join("logs");
        std::fs::create_dir(&sub).unwrap();
        let log = LogFile::open(&sub.join("service.log")).unwrap();
        std::fs::rename(&sub, dir.path().join("moved")).unwrap();
        assert!(log.reopen().is_err());
        log.write_all(b"kept\n").unwrap();
        let kept = std::fs::read_to_string(dir.path().join("moved/service.log")).unwrap();
        assert_eq!(kept, "kept\n");
    }
}
