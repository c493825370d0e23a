//! fs.read, fs.contention and fs.cache_size driven through the binary with
//! the smoke profile: structure, units and robust relations (never absolute
//! times), bad directories, and that no file, process or cgroup is left
//! behind, also after Ctrl-C.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{interrupt, json_of, measurements, p50, skips};

const MIB: f64 = 1048576.0;

/// A fresh directory on the disk the build lives on (the system temp
/// directory may be tmpfs, which the experiments refuse or avoid).
fn disk_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn osprobe(db_dir: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("osprobe"));
    cmd.arg("--db")
        .arg(db_dir.join("results.db"))
        .arg("--quiet");
    cmd
}

/// One smoke run of fs.* with TMPDIR pointing at a fresh directory.
struct FsRun {
    tmpdir: tempfile::TempDir,
    pid: u32,
    json: Value,
}

fn fs_run() -> &'static FsRun {
    static RUN: OnceLock<FsRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let tmpdir = disk_tempdir();
        let child = osprobe(tmpdir.path())
            .args([
                "run",
                "--only",
                "fs.*",
                "--profile",
                "smoke",
                "--json",
                "--no-store",
            ])
            .env("TMPDIR", tmpdir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let json = json_of(&out);
        FsRun { tmpdir, pid, json }
    })
}

#[test]
fn fs_read_gives_both_patterns_in_ns() {
    let run = &fs_run().json;
    let ms = measurements(run, "fs.read");
    for mode in ["direct", "buffered"] {
        let of_mode: Vec<_> = ms.iter().filter(|m| m["params"]["mode"] == mode).collect();
        if of_mode.is_empty() {
            // Only O_DIRECT may be missing, and only with its reason.
            let skipped = skips(run, "fs.read");
            assert!(
                mode == "direct"
                    && skipped
                        .iter()
                        .any(|s| s["reason"].as_str().unwrap().contains("O_DIRECT")),
                "fs.read mode={mode}: neither measured nor skipped for O_DIRECT: {skipped:?}"
            );
            continue;
        }
        for pattern in ["sequential", "random"] {
            let m = of_mode
                .iter()
                .find(|m| m["metric"] == pattern)
                .unwrap_or_else(|| panic!("fs.read {mode} {pattern} missing"));
            assert_eq!(m["unit"], "ns");
            assert!(p50(m) > 0.0, "{m}");
        }
    }
}

#[test]
fn fs_contention_gives_one_point_per_process_count() {
    let run = &fs_run().json;
    let per_block: Vec<_> = measurements(run, "fs.contention")
        .into_iter()
        .filter(|m| m["metric"] == "per_block")
        .collect();
    let mut counts: Vec<i64> = per_block
        .iter()
        .map(|m| m["params"]["processes"].as_i64().unwrap())
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        [1, 2],
        "smoke measures 1 and 2 processes, once each"
    );
    for m in per_block {
        assert_eq!(m["unit"], "ns");
        assert!(p50(m) > 0.0);
        let n = m["summary"]["n"].as_i64().unwrap();
        assert!(
            n >= m["params"]["processes"].as_i64().unwrap(),
            "a sample per process"
        );
    }
}

#[test]
fn fs_cache_size_reports_its_metrics_or_why_not() {
    let run = &fs_run().json;
    let ms = measurements(run, "fs.cache_size");
    if ms.is_empty() {
        let skipped = skips(run, "fs.cache_size");
        assert!(
            !skipped.is_empty(),
            "fs.cache_size neither measured nor skipped"
        );
        assert!(skipped
            .iter()
            .all(|s| !s["reason"].as_str().unwrap().is_empty()));
        return;
    }
    let metric = |name: &str| ms.iter().find(|m| m["metric"] == name).copied();
    let available = metric("memory_available").expect("memory_available");
    assert_eq!(available["unit"], "bytes");
    assert!(p50(available) > 0.0);
    let curve: Vec<_> = ms.iter().filter(|m| m["metric"] == "second_read").collect();
    assert!(curve.len() >= 2, "a curve of second reads");
    for m in &curve {
        assert_eq!(m["unit"], "bytes/s");
        assert!(p50(m) > 0.0);
        assert!(m["params"]["size"].as_i64().unwrap() > 0);
    }
    let knee = metric("cache_size").or_else(|| metric("cache_size_at_least"));
    let notes = |m: &Value| m["notes"].to_string();
    if let Some(k) = knee {
        assert_eq!(k["unit"], "bytes");
        assert!(p50(k) > 0.0);
    }
    // Within a cgroup limited to 32 MiB (smoke), the knee lies at the limit:
    // the cache cannot hold more, so the estimate is at most one step above.
    let in_cgroup = ms.iter().any(|m| notes(m).contains("method check"));
    if in_cgroup {
        let k = metric("cache_size").expect("a knee inside the memory cgroup");
        assert!(
            p50(k) <= 40.0 * MIB && p50(k) >= 8.0 * MIB,
            "knee {} MiB for a 32 MiB cgroup",
            p50(k) / MIB
        );
    }
}

/// Directories named `osprobe-<pid>-*` under /sys/fs/cgroup (a few levels
/// deep: v1 hierarchies, v2 root, the process's own cgroup).
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("osprobe-{pid}-");
    let mut found = Vec::new();
    let mut stack = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(&prefix) {
                found.push(e.path());
            } else if depth < 4 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    found
}

fn scratch_left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("osprobe-scratch-"))
        .collect()
}

#[test]
fn nothing_is_left_behind() {
    let run = fs_run();
    assert!(
        scratch_left_in(run.tmpdir.path()).is_empty(),
        "scratch directories left in TMPDIR"
    );
    assert!(cgroups_of(run.pid).is_empty(), "{:?}", cgroups_of(run.pid));
}

fn bench(db_dir: &Path, id: &str, profile: &str, dir: &Path) -> Output {
    osprobe(db_dir)
        .args(["bench", id, "--profile", profile, "--no-store", "--param"])
        .arg(format!("dir={}", dir.display()))
        .output()
        .unwrap()
}

#[test]
fn a_directory_that_cannot_be_used_is_an_error_naming_it() {
    let tmp = disk_tempdir();
    let missing = tmp.path().join("no-such-dir");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    for id in ["fs.read", "fs.contention", "fs.cache_size"] {
        for bad in [&missing, &file] {
            let out = bench(tmp.path(), id, "smoke", bad);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{id} dir={bad:?}: {stderr}");
            assert!(
                stderr.contains(&bad.display().to_string()),
                "{id}: the message names the directory: {stderr}"
            );
        }
    }
    assert!(!missing.exists(), "a missing directory is not created");
}

#[test]
fn a_given_directory_is_left_as_it_was() {
    let tmp = disk_tempdir();
    let dir = tmp.path().join("target");
    std::fs::create_dir(&dir).unwrap();
    for id in ["fs.read", "fs.contention"] {
        let out = bench(tmp.path(), id, "smoke", &dir);
        assert!(
            out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Ctrl-C in the middle of writing or reading: exit 130, no scratch
/// directory, no cgroup, no reader process left.
#[test]
fn interrupting_leaves_nothing_behind() {
    for id in ["fs.cache_size", "fs.contention"] {
        let tmp = disk_tempdir();
        let dir = tmp.path().join("target");
        std::fs::create_dir(&dir).unwrap();
        let child = osprobe(tmp.path())
            .args(["bench", id, "--profile", "full", "--no-store", "--param"])
            .arg(format!("dir={}", dir.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(1200));
        interrupt(child, id);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{id}: {left:?}");
        assert!(cgroups_of(pid).is_empty(), "{id}: {:?}", cgroups_of(pid));
        assert!(
            no_process_mentions(&dir.display().to_string()),
            "{id}: a reader process is still running"
        );
    }
}

/// Whether no process still runs with `needle` in its command line: a
/// reader forked by osprobe keeps its parent's command line, which names the
/// test's unique directory. Readers die with their parent (PDEATHSIG), which
/// takes a moment: look for up to a second.
fn no_process_mentions(needle: &str) -> bool {
    for _ in 0..20 {
        let running = std::fs::read_dir("/proc")
            .map(|entries| {
                entries.flatten().any(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(needle))
                        .unwrap_or(false)
                })
            })
            .unwrap_or(false);
        if !running {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// kill -9 during fs.cache_size leaves its scratch file and (as root) its
/// memory cgroup, which the kernel cannot tie to the process; the next
/// osprobe command of any kind (`list` here) sweeps both, since their names
/// carry the dead owner.
#[test]
fn what_kill_9_left_is_swept_by_the_next_command() {
    let tmp = disk_tempdir();
    let dir = tmp.path().join("target");
    std::fs::create_dir(&dir).unwrap();
    let mut child = osprobe(tmp.path())
        .args(["bench", "fs.cache_size", "--profile", "smoke", "--no-store"])
        .arg("--param")
        .arg(format!("dir={}", dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Root with a memory controller: wait for the cgroup too.
    let expect_cgroup = common::is_root()
        && (Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
            || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while scratch_left_in(&dir).is_empty() || (expect_cgroup && cgroups_of(pid).is_empty()) {
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fs.cache_size made no scratch directory (or cgroup) in time");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(no_process_mentions(&dir.display().to_string()));
    assert!(!scratch_left_in(&dir).is_empty(), "nothing to sweep");
    let out = osprobe(tmp.path())
        .env("TMPDIR", &dir)
        .arg("list")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(scratch_left_in(&dir), Vec::<String>::new());
    assert_eq!(cgroups_of(pid), Vec::<PathBuf>::new());
}
