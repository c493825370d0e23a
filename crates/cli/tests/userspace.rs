//! net.userspace through the binary (root; CI runs it): the smoke profile
//! prints its rows, and neither Ctrl-C nor kill -9 in the middle of a
//! smoltcp transfer leaves a namespace, a TUN device or a process behind.

mod common;

use common::{json_of, measurements, need_root, serialized, NetTraces, TEARDOWN};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn osprobe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_osprobe"));
    cmd.env_remove("OSPROBE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn the_smoke_profile_prints_a_row_per_stack() {
    if !need_root("the_smoke_profile_prints_a_row_per_stack") {
        return;
    }
    let _one = serialized();
    let out = osprobe()
        .args([
            "bench",
            "net.userspace",
            "--profile",
            "smoke",
            "--no-store",
            "--quiet",
            "--json",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    let rows = measurements(&run, "net.userspace");
    for stack in ["smoltcp", "kernel", "quinn"] {
        let of_stack: Vec<_> = rows
            .iter()
            .filter(|m| m["params"]["stack"] == stack)
            .collect();
        for metric in [
            "throughput",
            "min_rtt",
            "srtt",
            "retransmits",
            "cpu_per_byte",
        ] {
            assert!(
                of_stack.iter().any(|m| m["metric"] == metric),
                "{stack} has no {metric}: {run}"
            );
        }
        let throughput = of_stack
            .iter()
            .find(|m| m["metric"] == "throughput")
            .unwrap();
        assert!(
            throughput["summary"]["p50"].as_f64().unwrap() > 1e6,
            "{throughput}"
        );
        let notes = throughput["notes"].to_string();
        assert!(notes.contains("verified by the receiver"), "{notes}");
        assert!(notes.contains("configured round trip"), "{notes}");
    }
    // The table too.
    let out = osprobe()
        .args([
            "bench",
            "net.userspace",
            "--profile",
            "smoke",
            "--no-store",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("net.userspace") && table.contains("stack=smoltcp"),
        "{table}"
    );
}

/// A long smoltcp transfer, once it is sending: the child and what it holds.
fn smoltcp_sending() -> (Child, NetTraces) {
    let mut child = osprobe()
        .args([
            "bench",
            "net.userspace",
            "--profile",
            "smoke",
            "--no-store",
            "--quiet",
        ])
        .args(["--param", "stack=smoltcp", "--param", "duration=60s"])
        .spawn()
        .expect("start osprobe bench net.userspace");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Both emulator devices and smoltcp's own: three TUN descriptors.
    while tun_descriptors(pid) < 3 {
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "smoltcp's TUN device never appeared: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Into the sending phase.
    std::thread::sleep(Duration::from_millis(500));
    let traces = NetTraces::capture(pid);
    assert_eq!(traces.labels.len(), 2, "namespaces A and B: {traces:?}");
    (child, traces)
}

fn tun_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "/dev/net/tun"))
        .count()
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_during_a_smoltcp_transfer_leaves_nothing() {
    if !need_root("ctrl_c_during_a_smoltcp_transfer_leaves_nothing") {
        return;
    }
    let _one = serialized();
    let (child, traces) = smoltcp_sending();
    let started = Instant::now();
    signal(&child, libc::SIGINT);
    let out = finish(child);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It stopped the transfer rather than finishing its 60 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    let left = traces.wait_until_gone(TEARDOWN);
    assert!(left.is_empty(), "left behind after Ctrl-C: {left:?}");
}

#[test]
fn kill_9_during_a_smoltcp_transfer_leaves_nothing() {
    if !need_root("kill_9_during_a_smoltcp_transfer_leaves_nothing") {
        return;
    }
    let _one = serialized();
    let (child, traces) = smoltcp_sending();
    signal(&child, libc::SIGKILL);
    finish(child);
    let left = traces.wait_until_gone(TEARDOWN);
    assert!(left.is_empty(), "left behind after kill -9: {left:?}");
}
