//! A small tmpfs for the tests that need a real file system fault: one that
//! fills up (`disk_full`), or one made read-only (`lifecycle`). Mounting needs
//! root (CI runs as root); the mount is undone on drop, even when the test
//! failed, after whatever held its files has been killed.

use super::unique_name;
use std::path::PathBuf;
use std::process::Command;

/// A tmpfs mounted on a fresh folder; unmounted and removed on drop.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// `None` when this process may not mount (not root).
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(unique_name("idem-tmpfs"));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Tmpfs { dir })
    }

    /// Make the whole file system read-only (or writable again). Fails while
    /// a process holds one of its files open for writing.
    pub fn set_read_only(&self, read_only: bool) {
        let option = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        let status = Command::new("mount")
            .args(["-o", option])
            .arg(&self.dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -o {option} {}", self.dir.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        unmount(&self.dir);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Unmount `dir`; if something still holds a file open there, detach it
/// now, to be freed when that closes.
pub fn unmount(dir: &std::path::Path) {
    let unmounted = Command::new("umount")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !unmounted {
        let _ = Command::new("umount").arg("-l").arg(dir).status();
    }
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
