//! A small ext4 file system on a loop device, mounted `errors=remount-ro`,
//! for the tests that need a file system to fail, or to stop answering,
//! under a running server.
//! ext4's `trigger_fs_error` does what a real I/O error does: the file system
//! turns read-only at once, open files and all (a tmpfs cannot be remounted
//! read-only while a file is open for writing); `fsfreeze` makes it stop
//! answering, as a hung disk does. Needs root; the freeze, the mount, the
//! loop device and the image are undone on drop, even when the test failed:
//! the freeze first, as a process blocked on a frozen file system cannot
//! even be killed; the mount after the server that held its files.

use super::unique_name;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct LoopExt4 {
    pub dir: PathBuf,
    image: PathBuf,
    /// `/dev/loopN`, once attached.
    device: Option<String>,
    mounted: bool,
}

impl LoopExt4 {
    /// A fresh file system of `megabytes`, mounted on a new folder. Panics
    /// if any step fails: the caller checks for root first.
    pub fn mount(megabytes: u64) -> LoopExt4 {
        let name = unique_name("idem-ext4");
        let mut fs = LoopExt4 {
            dir: std::env::temp_dir().join(&name),
            image: std::env::temp_dir().join(format!("{name}.img")),
            device: None,
            mounted: false,
        };
        let image = std::fs::File::create(&fs.image).unwrap();
        image.set_len(megabytes << 20).unwrap();
        drop(image);
        run("mkfs.ext4", &["-q", "-F", path_str(&fs.image)]);
        let attached = output("losetup", &["--find", "--show", path_str(&fs.image)]);
        fs.device = Some(attached.trim().to_string());
        std::fs::create_dir_all(&fs.dir).unwrap();
        fs.mount_device();
        fs
    }

    /// What ext4 does on an I/O error under `errors=remount-ro`: from now on
    /// every write and every sync on this file system fails (`EROFS`).
    pub fn fail_now(&self) {
        let device = self.device.as_deref().expect("attached");
        let name = Path::new(device).file_name().unwrap().to_string_lossy();
        let trigger = format!("/sys/fs/ext4/{name}/trigger_fs_error");
        std::fs::write(&trigger, "idempotent-tool test: a disk error")
            .unwrap_or_else(|e| panic!("write {trigger}: {e}"));
    }

    /// `fsfreeze --freeze`: from now on every write to this file system, a
    /// sync, and a write to a page of one of its files mapped in memory (the
    /// `-shm` of a WAL database) block in the kernel until the thaw. The
    /// guard thaws it when dropped, so a failing test never leaves it frozen.
    pub fn freeze(&self) -> Frozen<'_> {
        run("fsfreeze", &["--freeze", path_str(&self.dir)]);
        Frozen {
            dir: &self.dir,
            thawed: false,
        }
    }

    /// What an operator does next: unmount, check the file system, mount it
    /// again. Only what had reached the device is there.
    pub fn repair_and_mount_again(&mut self) {
        self.unmount();
        let device = self.device.clone().expect("attached");
        // 0: clean, 1: errors corrected; both leave it mountable.
        let code = Command::new("e2fsck")
            .args(["-f", "-y", &device])
            .output()
            .expect("run e2fsck")
            .status
            .code();
        assert!(matches!(code, Some(0 | 1)), "e2fsck {device}: {code:?}");
        self.mount_device();
    }

    fn mount_device(&mut self) {
        let device = self.device.clone().expect("attached");
        run(
            "mount",
            &["-o", "errors=remount-ro", &device, path_str(&self.dir)],
        );
        self.mounted = true;
    }

    fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        super::tmpfs::unmount(&self.dir);
        self.mounted = false;
    }
}

/// A frozen `LoopExt4`; thawed by `thaw`, or on drop.
pub struct Frozen<'a> {
    dir: &'a Path,
    thawed: bool,
}

impl Frozen<'_> {
    /// `fsfreeze --unfreeze`: everything blocked goes on.
    pub fn thaw(mut self) {
        run("fsfreeze", &["--unfreeze", path_str(self.dir)]);
        self.thawed = true;
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        if !self.thawed {
            let _ = Command::new("fsfreeze")
                .args(["--unfreeze", path_str(self.dir)])
                .status();
        }
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        self.unmount();
        if let Some(device) = self.device.take() {
            let _ = Command::new("losetup").args(["-d", &device]).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.image);
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn run(program: &str, args: &[&str]) {
    output(program, args);
}

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
