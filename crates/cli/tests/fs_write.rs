//! fs.fsync, fs.write, fs.iodepth and fs.ops driven through the binary with the smoke profile:
//! the rows each point gives, their units, robust relations (never absolute
//! times), bad directories, and that no scratch file is left behind, also
//! after Ctrl-C.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{interrupt, json_of, measurements, p50, skips};

/// A fresh directory on the disk the build lives on (the system temp
/// directory may be tmpfs, which the experiments refuse).
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

/// `osprobe bench ID --profile smoke --json` writing into a fresh
/// directory; checks the directory is empty afterwards.
fn bench_smoke(id: &str) -> Value {
    let tmp = disk_tempdir();
    let dir = tmp.path().join("target");
    std::fs::create_dir(&dir).unwrap();
    let out = osprobe(tmp.path())
        .args(["bench", id, "--profile", "smoke", "--json", "--no-store"])
        .arg("--param")
        .arg(format!("dir={}", dir.display()))
        .output()
        .unwrap();
    let json = json_of(&out);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "{id} left {left:?}");
    json
}

/// O_DIRECT is the only thing a disk may refuse, and then with the reason.
fn skipped_for_o_direct(run: &Value, id: &str) -> bool {
    skips(run, id)
        .iter()
        .any(|s| s["reason"].as_str().unwrap_or("").contains("O_DIRECT"))
}

#[test]
fn fs_fsync_gives_a_latency_per_method() {
    let run = bench_smoke("fs.fsync");
    let ms = measurements(&run, "fs.fsync");
    for method in ["fsync", "fdatasync", "dsync", "direct_dsync"] {
        let Some(m) = ms.iter().find(|m| m["params"]["method"] == method) else {
            assert!(
                method == "direct_dsync" && skipped_for_o_direct(&run, "fs.fsync"),
                "fs.fsync method={method}: neither measured nor skipped for O_DIRECT"
            );
            continue;
        };
        assert_eq!(m["metric"], "per_op");
        assert_eq!(m["unit"], "ns");
        assert_eq!(m["params"]["block"], 4096);
        assert!(p50(m) > 0.0, "{m}");
        let s = &m["summary"];
        assert!(s["p99"].as_f64().unwrap() >= p50(m));
        assert!(m["notes"].to_string().contains("ops/s"), "{m}");
    }
}

#[test]
fn fs_write_gives_bandwidth_iops_and_latency_per_point() {
    let run = bench_smoke("fs.write");
    let ms = measurements(&run, "fs.write");
    for mode in ["buffered", "direct", "dsync"] {
        for pattern in ["sequential", "random"] {
            for block in [4096, 1 << 20] {
                let of_point: Vec<_> = ms
                    .iter()
                    .filter(|m| {
                        m["params"]["mode"] == mode
                            && m["params"]["pattern"] == pattern
                            && m["params"]["block"] == block
                    })
                    .collect();
                if of_point.is_empty() {
                    assert!(
                        mode == "direct" && skipped_for_o_direct(&run, "fs.write"),
                        "fs.write {mode} {pattern} {block}: neither measured nor skipped"
                    );
                    continue;
                }
                let get = |metric: &str| of_point.iter().find(|m| m["metric"] == metric);
                let bw = get("bandwidth").expect("bandwidth");
                assert_eq!(bw["unit"], "bytes/s");
                assert!(p50(bw) > 0.0);
                let iops = get("iops").expect("iops");
                assert_eq!(iops["unit"], "count");
                // Bandwidth and IOPS come from the same windows.
                let ratio = p50(bw) / p50(iops) / block as f64;
                assert!((0.5..2.0).contains(&ratio), "bytes per write {ratio}");
                let lat = get("latency").expect("latency");
                assert_eq!(lat["unit"], "ns");
                assert!(p50(lat) > 0.0);
                match get("buffered_then_fsync") {
                    Some(f) => {
                        assert_eq!(mode, "buffered");
                        // Each window's bytes over more time: never faster.
                        assert!(p50(f) <= p50(bw) * 1.000001, "{f} vs {bw}");
                        assert!(bw["notes"].to_string().contains("end_fsync=0"));
                    }
                    None => assert_ne!(mode, "buffered", "buffered_then_fsync missing"),
                }
            }
        }
    }
}

#[test]
fn fs_iodepth_gives_iops_bandwidth_and_latency_per_depth() {
    let run = bench_smoke("fs.iodepth");
    let ms = measurements(&run, "fs.iodepth");
    if ms.is_empty() {
        assert!(
            skipped_for_o_direct(&run, "fs.iodepth"),
            "neither measured nor skipped"
        );
        return;
    }
    for op in ["randread", "randwrite"] {
        for depth in [1, 8] {
            let of_point: Vec<_> = ms
                .iter()
                .filter(|m| m["params"]["op"] == op && m["params"]["depth"] == depth)
                .collect();
            let get = |metric: &str| {
                of_point
                    .iter()
                    .find(|m| m["metric"] == metric)
                    .unwrap_or_else(|| panic!("fs.iodepth {op} depth={depth}: no {metric}"))
            };
            let iops = get("iops");
            assert_eq!(iops["unit"], "count");
            assert!(p50(iops) > 0.0);
            // Bandwidth is IOPS times 4 KiB, window by window.
            let ratio = p50(get("bandwidth")) / p50(iops);
            assert!((ratio - 4096.0).abs() < 1.0, "{ratio}");
            assert_eq!(get("latency")["unit"], "ns");
            assert!(p50(get("latency")) > 0.0);
            // Which engine ran is said, and why when it is not io_uring.
            let notes = iops["notes"].to_string();
            assert!(
                notes.contains("engine: io_uring") || notes.contains("io_uring is unavailable"),
                "{notes}"
            );
        }
    }
}

#[test]
fn fs_ops_gives_every_operation_per_size() {
    let run = bench_smoke("fs.ops");
    let ms = measurements(&run, "fs.ops");
    for size in [0, 4096] {
        for op in ["create", "stat", "open_close", "readdir", "unlink"] {
            let m = ms
                .iter()
                .find(|m| m["params"]["size"] == size && m["metric"] == op)
                .unwrap_or_else(|| panic!("fs.ops size={size}: no {op}"));
            assert_eq!(m["unit"], "ns");
            assert_eq!(m["params"]["files"], 100);
            assert!(p50(m) > 0.0, "{m}");
            // One sample per file and pass (readdir: five per pass).
            let n = m["summary"]["n"].as_u64().unwrap();
            assert!(
                if op == "readdir" { n >= 5 } else { n >= 100 },
                "{op}: n={n}"
            );
        }
    }
}

#[test]
fn a_directory_that_cannot_be_used_is_an_error_naming_it() {
    let tmp = disk_tempdir();
    let missing = tmp.path().join("no-such-dir");
    for id in ["fs.fsync", "fs.write", "fs.iodepth", "fs.ops"] {
        let out = osprobe(tmp.path())
            .args(["bench", id, "--profile", "smoke", "--no-store", "--param"])
            .arg(format!("dir={}", missing.display()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{id}: {stderr}");
        assert!(
            stderr.contains(&missing.display().to_string()),
            "{id}: the message names the directory: {stderr}"
        );
    }
    assert!(!missing.exists(), "a missing directory is not created");
}

#[test]
fn a_block_size_out_of_range_is_a_usage_error() {
    let tmp = disk_tempdir();
    let out = osprobe(tmp.path())
        .args(["bench", "fs.write", "--profile", "smoke", "--no-store"])
        .args(["--param", "block=2M"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("block"), "{stderr}");
}

/// Ctrl-C in the middle of writing: exit 130 and no scratch file left.
#[test]
fn interrupting_leaves_nothing_behind() {
    for id in ["fs.write", "fs.fsync", "fs.iodepth", "fs.ops"] {
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
        std::thread::sleep(Duration::from_millis(1200));
        interrupt(child, id);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{id}: {left:?}");
    }
}
