//! Faults injected in the middle of real work: what the user sees and that
//! nothing measured is lost. Each test breaks a real component (a small
//! tmpfs filled up under the store) while osprobe is measuring, then checks
//! the message and what was kept. docs/cleanup.md has the table.

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

/// A tmpfs of `size` mounted on `dir`, unmounted when dropped (also when
/// the test fails).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "osprobe-faults",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs on {}", dir.display());
        SmallDisk(dir.to_path_buf())
    }

    /// Write until the disk says it is full (bounded by its size).
    fn fill(&self) {
        use std::io::Write as _;
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let chunk = vec![0xa5u8; 64 << 10];
        for _ in 0..4096 {
            if let Err(e) = filler.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                return;
            }
        }
        panic!("the small disk never filled up");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Wait for `child` at most `limit` (killed after it), with its stderr.
fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> (std::process::ExitStatus, String) {
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("osprobe did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, reader.join().unwrap())
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// The store's disk fills up while a run is measuring: the table is still
/// printed, the run is kept as a JSON line in the current directory, the
/// error names that file and the store, and importing the file later
/// stores the very run.
#[test]
fn a_full_disk_under_the_store_mid_run_loses_nothing_measured() {
    if !common::need_root("a_full_disk_under_the_store_mid_run_loses_nothing_measured") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(&dir.path().join("small"), "1m");
    let db = disk.0.join("results.db");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut child = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_DB")
        .current_dir(&work)
        .arg("--db")
        .arg(&db)
        .args(["bench", "cpu.syscall", "--profile", "smoke"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The environment block is printed once the store is open and before
    // measuring: stop the run there, fill the disk, let it go on.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    signal(child.id(), "-STOP");
    disk.fill();
    signal(child.id(), "-CONT");
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    let (status, err) = wait_bounded(child, Duration::from_secs(300));
    let printed = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {err}");
    assert!(
        printed.contains("getppid"),
        "the table is printed: {printed}"
    );
    assert!(
        err.contains(&format!("storing the run in {}", db.display())),
        "{err}"
    );
    assert!(err.contains("full"), "{err}");
    let kept: Vec<PathBuf> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        err.contains(&format!("the run is kept in {}", kept[0].display())),
        "{err}"
    );
    let run: Value =
        serde_json::from_str(std::fs::read_to_string(&kept[0]).unwrap().trim()).unwrap();
    assert!(!run["measurements"].as_array().unwrap().is_empty());
    // Nothing lost: the kept file imports into a store that has room.
    let other = dir.path().join("other.db");
    let imported = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_DB")
        .arg("--db")
        .arg(&other)
        .arg("import")
        .arg(&kept[0])
        .output()
        .unwrap();
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let shown = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_DB")
        .arg("--db")
        .arg(&other)
        .args(["show", run["id"].as_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let back: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(back["measurements"], run["measurements"]);
}
