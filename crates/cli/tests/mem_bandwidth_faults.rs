//! mem.bandwidth and mem.page_fault driven through the binary with the
//! smoke profile. Robust relations only (units, signs, a major fault costs
//! more than a minor one), never absolute figures; and the scratch files of
//! the major faults are gone afterwards.

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

mod common;
use common::{interrupt, json_of, measurements};

/// One smoke run of both experiments, with TMPDIR set to a fresh
/// directory so that leftovers can be seen.
struct SmokeRun {
    json: Value,
    tmpdir: tempfile::TempDir,
}

fn smoke_run() -> &'static SmokeRun {
    static RUN: OnceLock<SmokeRun> = OnceLock::new();
    RUN.get_or_init(|| {
        // Under the target directory (on disk), not /tmp (tmpfs on some
        // machines, where a file cannot be evicted and major faults skip).
        let tmpdir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let out = Command::cargo_bin("osprobe")
            .unwrap()
            .env("TMPDIR", tmpdir.path())
            .args([
                "--quiet",
                "run",
                "--only",
                "mem.bandwidth,mem.page_fault",
                "--profile",
                "smoke",
                "--json",
                "--no-store",
            ])
            .output()
            .unwrap();
        let json = json_of(&out);
        SmokeRun { json, tmpdir }
    })
}

fn allowed_cpus() -> usize {
    // SAFETY: set is a plain bitmask filled by sched_getaffinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        libc::CPU_COUNT(&set) as usize
    }
}

#[test]
fn bandwidth_is_positive_in_bytes_per_second_for_one_and_all_cpus() {
    let run = &smoke_run().json;
    let ms = measurements(run, "mem.bandwidth");
    let mut metrics = vec!["read", "write", "copy"];
    if cfg!(target_arch = "x86_64") {
        metrics.push("write_nt");
    }
    let mut thread_counts = vec![1];
    if allowed_cpus() > 1 {
        thread_counts.push(allowed_cpus() as i64);
    }
    for metric in &metrics {
        for threads in &thread_counts {
            let m = ms
                .iter()
                .find(|m| m["metric"] == *metric && m["params"]["threads"] == *threads)
                .unwrap_or_else(|| panic!("mem.bandwidth {metric} threads={threads} missing"));
            assert_eq!(m["unit"], "bytes/s", "{metric}");
            assert!(m["summary"]["p50"].as_f64().unwrap() > 0.0, "{metric}");
            assert!(m["summary"]["min"].as_f64().unwrap() > 0.0, "{metric}");
            let notes = m["notes"].as_array().unwrap();
            assert!(
                notes
                    .iter()
                    .any(|n| n.as_str().unwrap().contains("theoretical peak"))
                    || m["prediction"].is_object(),
                "{metric}: the peak is given or said to be unknown"
            );
        }
    }
}

#[test]
fn page_faults_are_positive_and_major_costs_more_than_minor() {
    let run = &smoke_run().json;
    let ms = measurements(run, "mem.page_fault");
    let tsc = run["environment"]["clock"]["source"] == "tsc";
    let median = |fault: &str, order: &str| -> f64 {
        let m = ms
            .iter()
            .find(|m| m["metric"] == fault && m["params"]["order"] == order)
            .unwrap_or_else(|| {
                panic!(
                    "mem.page_fault {fault} order={order} missing; skipped: {}",
                    run["skipped"]
                )
            });
        assert_eq!(m["unit"], "ns");
        assert_eq!(m["cycles"].is_object(), tsc, "cycles exactly with the TSC");
        m["summary"]["p50"].as_f64().unwrap()
    };
    for order in ["sequential", "random"] {
        let minor = median("minor", order);
        let major = median("major", order);
        assert!(minor > 0.0, "minor {order}: {minor} ns");
        assert!(
            major > minor,
            "a major fault ({major} ns) must cost more than a minor one ({minor} ns), {order}"
        );
    }
}

#[test]
fn scratch_files_are_removed() {
    let smoke = smoke_run();
    let left: Vec<String> = std::fs::read_dir(smoke.tmpdir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("osprobe-scratch-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_bad_directory_is_named_and_nothing_is_left() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let missing = tmp.path().join("does-not-exist");
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .env("TMPDIR", tmp.path())
        .args([
            "--quiet",
            "bench",
            "mem.page_fault",
            "--profile",
            "smoke",
            "--param",
            "fault=major",
            "--param",
            "order=sequential",
            "--param",
        ])
        .arg(format!("dir={}", missing.display()))
        .arg("--no-store")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(!Path::new(&missing).exists());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// Ctrl-C while the major-fault file is written or sampled: exit 130 and
/// the scratch directory is removed all the same.
#[test]
fn interrupting_removes_the_scratch_file() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("osprobe"))
        .env("TMPDIR", tmp.path())
        .args([
            "--quiet",
            "bench",
            "mem.page_fault",
            "--profile",
            "full",
            "--param",
            "fault=major",
            "--param",
            "order=random",
            "--no-store",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the scratch directory exists, then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_dir(tmp.path()).unwrap().count() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no scratch directory appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    interrupt(child, "mem.page_fault major");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
