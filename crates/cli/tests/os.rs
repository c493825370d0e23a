//! os.* driven through the binary with the smoke profile: every point
//! measured, in its unit, with a positive median. No absolute figures.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{children_of, interrupt, is_zombie_or_gone, json_of, measurements, p50, skips};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `osprobe bench ID --profile smoke --json`, with TMPDIR in a fresh
/// directory so that leftover scratch files can be seen.
fn smoke(id: &str) -> Value {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .env("TMPDIR", tmp.path())
        .args(["bench", id, "--profile", "smoke", "--json", "--no-store"])
        .output()
        .unwrap();
    let run = json_of(&out);
    assert!(
        skips(&run, id).is_empty(),
        "{id} skipped: {:?}",
        skips(&run, id)
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{id} left files behind: {left:?}");
    run
}

/// The metrics of `id` in `run`, each checked for unit and a positive median.
fn metrics(run: &Value, id: &str, unit: &str) -> Vec<String> {
    let ms = measurements(run, id);
    assert!(!ms.is_empty(), "{id}: no measurements");
    for m in &ms {
        if m["unit"] == unit {
            assert!(p50(m) > 0.0, "{id} {}: {}", m["metric"], p50(m));
        }
    }
    ms.iter()
        .map(|m| m["metric"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn syscall_surface_times_every_call() {
    let id = "os.syscall_surface";
    let run = smoke(id);
    let got = metrics(&run, id, "ns");
    for op in [
        "open_close",
        "read",
        "write_file",
        "write_null",
        "stat",
        "fstat",
        "getdents",
    ] {
        assert!(got.iter().any(|m| m == op), "{op} missing in {got:?}");
    }
}

#[test]
fn signal_times_installation_and_delivery() {
    let id = "os.signal";
    let got = metrics(&smoke(id), id, "ns");
    assert_eq!(got, ["install", "deliver"]);
}

#[test]
fn select_poll_and_epoll_are_timed_over_idle_pipes() {
    let id = "os.select";
    let got = metrics(&smoke(id), id, "ns");
    assert_eq!(got, ["select", "poll", "epoll"]);
}

#[test]
fn unix_socket_round_trip_in_ns_and_bandwidth_in_bytes_per_second() {
    let id = "os.unix_socket";
    let run = smoke(id);
    let got = metrics(&run, id, "ns");
    assert_eq!(got, ["round_trip", "bandwidth"]);
    let ms = measurements(&run, id);
    assert_eq!(ms[0]["unit"], "ns");
    assert_eq!(ms[1]["unit"], "bytes/s");
    assert!(p50(ms[1]) > 0.0);
}

#[test]
fn pipe_bandwidth_is_in_bytes_per_second() {
    let id = "os.pipe_bandwidth";
    let run = smoke(id);
    let got = metrics(&run, id, "bytes/s");
    assert_eq!(got, ["bandwidth"]);
    assert_eq!(measurements(&run, id)[0]["unit"], "bytes/s");
}

#[test]
fn mmap_times_mapping_with_and_without_touching() {
    let id = "os.mmap";
    let got = metrics(&smoke(id), id, "ns");
    assert_eq!(got, ["map_unmap", "map_touch_unmap"]);
}

/// A full run of os.unix_socket (seconds per point), started in the
/// background.
fn full_run() -> Child {
    Command::cargo_bin("osprobe")
        .unwrap()
        .args([
            "--quiet",
            "run",
            "--only",
            "os.unix_socket",
            "--profile",
            "full",
            "--no-store",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The forked peer a running osprobe measures with, once it exists; the
/// run is killed and reaped if none appears.
fn peer_of(run: &mut Child) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A fork of osprobe (same name), not a tool the environment
        // capture runs.
        let peer = children_of(run.id()).into_iter().find(|&c| {
            std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|n| n.trim() == "osprobe")
        });
        if let Some(peer) = peer {
            return peer;
        }
        if Instant::now() >= deadline {
            let _ = run.kill();
            let _ = run.wait();
            panic!("no peer process appeared");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait (generously) until `pid` has exited.
fn gone_within(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if is_zombie_or_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    is_zombie_or_gone(pid)
}

#[test]
fn ctrl_c_stops_and_reaps_the_peer() {
    let mut child = full_run();
    let peer = peer_of(&mut child);
    interrupt(child, "os.unix_socket interrupted");
    assert!(
        gone_within(peer, Duration::from_secs(5)),
        "peer {peer} outlived osprobe"
    );
}

#[test]
fn the_peer_dies_with_a_killed_osprobe() {
    let mut child = full_run();
    let peer = peer_of(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        gone_within(peer, Duration::from_secs(5)),
        "peer {peer} outlived a killed osprobe"
    );
}
