//! `osprobe pager run` and the pager experiments, driven through the
//! binary. They need userfaultfd (root here, and in CI).

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, need_root, Served};
use serde_json::Value;
use std::process::{Command, Output};

fn osprobe(args: &[&str]) -> Output {
    Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_TOKEN")
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn counters(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    let doc = json_of(out);
    common::assert_follows("pager-run.schema.json", &doc);
    doc["counters"].clone()
}

fn add_up(c: &Value) {
    let n = |k: &str| c[k].as_u64().unwrap();
    assert_eq!(
        n("faults"),
        n("zero_fills") + n("swap_ins") + n("referenced_bit_faults"),
        "{c}"
    );
    assert_eq!(n("failures"), 0, "{c}");
}

#[test]
fn pager_run_pages_a_trace_and_a_sort_through_a_swap_file() {
    if !need_root("pager_run_pages_a_trace_and_a_sort_through_a_swap_file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let swap = dir.path().join("swap");
    let spec = format!("file:{}", swap.display());
    let out = osprobe(&[
        "pager", "run", "--frames", "16", "--swap", &spec, "--json", "--", "zipf",
    ]);
    let c = counters(&out);
    add_up(&c);
    assert!(c["swap_ins"].as_u64().unwrap() > 0, "{c}");
    assert!(!swap.exists(), "the swap file is removed afterwards");
    let out = osprobe(&[
        "pager", "run", "--frames", "32", "--pages", "256", "--policy", "fifo", "--json", "--",
        "sort",
    ]);
    let doc = json_of(&out);
    common::assert_follows("pager-run.schema.json", &doc);
    assert!(doc["checked"].as_str().unwrap().contains("sorted"), "{doc}");
    add_up(&doc["counters"]);
    // The human form names the counters.
    let out = osprobe(&[
        "pager", "run", "--frames", "3", "--policy", "fifo", "--", "classic",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("faults          9 = 5 zero-fill + 4 swap-in"),
        "{text}"
    );
}

#[test]
fn pager_run_swaps_to_the_remote_file_service() {
    if !need_root("pager_run_swaps_to_the_remote_file_service") {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let server = Served::start(export.path(), &[]);
    let spec = format!("rfs:{}", server.addr);
    let out = osprobe(&[
        "pager", "run", "--frames", "16", "--pages", "64", "--swap", &spec, "--json", "--",
        "uniform",
    ]);
    let c = counters(&out);
    add_up(&c);
    assert!(c["write_backs"].as_u64().unwrap() > 0, "{c}");
    drop(server);
    let left: Vec<_> = std::fs::read_dir(export.path()).unwrap().collect();
    assert!(left.is_empty(), "the remote swap file is removed: {left:?}");
}

/// --read-around and --evict-batch reach the pager: a sequential scan
/// through rfs swap brings pages in ahead, and the data stays intact.
#[test]
fn pager_run_reads_around_and_writes_behind_over_rfs() {
    if !need_root("pager_run_reads_around_and_writes_behind_over_rfs") {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let server = Served::start(export.path(), &[]);
    let spec = format!("rfs:{}", server.addr);
    let run = |batch: &str| {
        osprobe(&[
            "pager",
            "run",
            "--frames",
            "32",
            "--pages",
            "128",
            "--swap",
            &spec,
            "--tcp",
            "--window",
            "16",
            "--read-around",
            batch,
            "--evict-batch",
            batch,
            "--json",
            "--",
            "sequential",
        ])
    };
    let plain = counters(&run("1"));
    let batched = counters(&run("8"));
    add_up(&plain);
    add_up(&batched);
    assert!(
        batched["swap_ins"].as_u64().unwrap() < plain["swap_ins"].as_u64().unwrap(),
        "read-around serves sequential faults ahead: {plain} vs {batched}"
    );
    let text = String::from_utf8_lossy(&run_text(&spec).stdout).into_owned();
    assert!(text.contains("read-around 8 ("), "{text}");
    drop(server);
}

fn run_text(spec: &str) -> Output {
    osprobe(&[
        "pager",
        "run",
        "--frames",
        "32",
        "--pages",
        "128",
        "--swap",
        spec,
        "--tcp",
        "--read-around",
        "8",
        "--evict-batch",
        "8",
        "--",
        "sequential",
    ])
}

/// kill -9 of a pager swapping to rfs over TCP: the server removes its
/// swap file (a scratch file of the session) when the connection drops.
#[test]
fn a_killed_pager_leaves_no_swap_file_on_the_server() {
    if !need_root("a_killed_pager_leaves_no_swap_file_on_the_server") {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let server = Served::start(export.path(), &[]);
    let spec = format!("rfs:{}", server.addr);
    let mut child = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_TOKEN")
        .args([
            "pager", "run", "--frames", "8", "--pages", "256", "--swap", &spec,
        ])
        .args(["--tcp", "--length", "100000000", "--", "uniform"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let swap_files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(export.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut swapping = false;
    while !swapping && std::time::Instant::now() < deadline {
        swapping = swap_files()
            .iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(swapping, "the pager never wrote to its swap");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !swap_files().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(swap_files(), Vec::<std::path::PathBuf>::new());
}

#[test]
fn bad_pager_input_is_a_usage_error_naming_what_is_accepted() {
    for (args, expect) in [
        (
            vec!["pager", "run", "--frames", "8", "--", "quicksort"],
            "expected one of",
        ),
        (
            vec![
                "pager", "run", "--frames", "8", "--swap", "nfs:host", "--", "zipf",
            ],
            "file:PATH or rfs:HOST[:PORT]",
        ),
        (
            vec!["pager", "run", "--frames", "0", "--", "zipf"],
            "frames",
        ),
        (
            vec![
                "pager", "run", "--frames", "8", "--policy", "opt", "--", "zipf",
            ],
            "opt",
        ),
        (
            vec!["pager", "run", "--frames", "8", "--", "zipf", "loop"],
            "one word",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--read-around",
                "9",
                "--",
                "zipf",
            ],
            "--read-around 9: at most --frames (8)",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--evict-batch",
                "0",
                "--",
                "zipf",
            ],
            "--evict-batch",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--processes",
                "2",
                "--read-around",
                "4",
                "--",
                "zipf",
            ],
            "single-process pager",
        ),
    ] {
        let out = osprobe(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expect), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn the_pager_experiments_in_the_smoke_profile() {
    if !need_root("the_pager_experiments_in_the_smoke_profile") {
        return;
    }
    let out = osprobe(&[
        "run",
        "--profile",
        "smoke",
        "--only",
        "pager.*",
        "--no-store",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json_of(&out);
    let faults = measurements(&run, "pager.fault");
    let metrics: Vec<&str> = faults
        .iter()
        .map(|m| m["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        metrics,
        ["zero_fill", "zero_fill", "swap_in_file", "swap_in_rfs"]
    );
    // The second zero-fill is served on the faulting thread.
    assert_eq!(faults[1]["params"]["serve"], "faulting-thread");
    assert!(faults[1]["notes"].to_string().contains("SIGBUS handler"));
    for m in &faults {
        assert_eq!(m["unit"], "ns");
        let notes = m["notes"].to_string();
        assert!(notes.contains("kernel's own"), "{notes}");
    }
    let policy = measurements(&run, "pager.policy");
    let classic = |mode: &str, frames: i64| {
        policy
            .iter()
            .find(|m| {
                m["metric"] == "faults"
                    && m["params"]["trace"] == "classic"
                    && m["params"]["policy"] == "fifo"
                    && m["params"]["mode"] == mode
                    && m["params"]["frames"] == frames
            })
            .unwrap_or_else(|| panic!("no classic fifo {mode} {frames}"))
    };
    for mode in ["offline", "live"] {
        assert_eq!(classic(mode, 3)["summary"]["p50"], 9.0);
        assert_eq!(classic(mode, 4)["summary"]["p50"], 10.0);
        assert!(classic(mode, 4)["notes"]
            .to_string()
            .contains("Belady's anomaly"));
    }
    assert!(policy.iter().any(|m| m["metric"] == "run_time"));
}

#[test]
fn a_full_swap_stops_the_workload_with_the_reason_not_wrong_data() {
    if !need_root("a_full_swap_stops_the_workload_with_the_reason_not_wrong_data") {
        return;
    }
    // A 64 KiB file system: the 17th page written back does not fit.
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        osprobe_core::testing::skip("cannot mount a 64 KiB tmpfs (needs root)");
        return;
    }
    let spec = format!("file:{}", dir.path().join("swap").display());
    let out = osprobe(&[
        "pager",
        "run",
        "--frames",
        "4",
        "--pages",
        "64",
        "--swap",
        &spec,
        "--",
        "sequential",
    ]);
    let _ = Command::new("umount").arg(dir.path()).status();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("No space left on device") && err.contains("SIGBUS"),
        "{err}"
    );
    assert!(err.contains("could not serve"), "{err}");
    // An existing file is never used as swap (it would be truncated).
    let out = osprobe(&[
        "pager",
        "run",
        "--frames",
        "4",
        "--swap",
        "file:/dev/full",
        "--",
        "zipf",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("exists"), "{}", stderr(&out));
}
