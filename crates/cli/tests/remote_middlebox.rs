//! `osprobe net TEST --to HOST --delay ...`: the emulator as a middlebox in
//! front of a "real" host (a namespace reached through this namespace's
//! routing, running `osprobe serve` with a token). The round trip to it
//! carries the emulated delay, a bulk test runs through it, and nothing is
//! left behind: no namespace of the run's, no NAT table, forwarding
//! restored. Root only.

mod common;
mod ns_host;

use common::{json_of, measurements, need_root, p50, serialized};
use ns_host::{token_file, NsHost};
use osprobe_link::{forwarding, masquerade};
use std::net::Ipv4Addr;
use std::process::{Command, Output, Stdio};

/// The host of these tests, in this helper's fixed range.
const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
/// An address in the other fixed range, made unreachable for one test.
const NOWHERE: &str = "198.18.101.99";

fn ready() -> bool {
    if !need_root("the middlebox in front of a host") {
        return false;
    }
    if let Err(e) = masquerade::nft_program() {
        osprobe_core::testing::skip(e);
        return false;
    }
    true
}

/// Run osprobe to the end; its pid too (to look for what it left).
fn osprobe(args: &[&str]) -> (u32, Output) {
    let child = Command::new(env!("CARGO_BIN_EXE_osprobe"))
        .env_remove("OSPROBE_TOKEN")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

fn tables_of(pid: u32) -> Vec<String> {
    masquerade::tables()
        .unwrap()
        .into_iter()
        .filter(|t| t.starts_with(&format!("{}{pid}_", masquerade::TABLE_PREFIX)))
        .collect()
}

/// The run's namespaces: veth host ends named after its pid.
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("osprobe-{pid:x}");
    common::osprobe_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn assert_nothing_left(pid: u32, egress: &str) {
    assert!(
        tables_of(pid).is_empty(),
        "NAT table left: {:?}",
        tables_of(pid)
    );
    assert_eq!(
        forwarding::read(egress).unwrap(),
        "0",
        "forwarding not restored"
    );
    // Namespaces die with their last holder; the kernel may take a moment.
    let deadline = std::time::Instant::now() + common::TEARDOWN;
    while !namespaces_of(pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(namespaces_of(pid).is_empty(), "{:?}", namespaces_of(pid));
}

#[test]
fn net_to_a_host_with_a_delay_crosses_the_emulator() {
    if !ready() {
        return;
    }
    let _one = serialized();
    let (_dir, token) = token_file("mid-middlebox");
    let token = token.to_str().unwrap();
    let export = tempfile::tempdir().unwrap();
    let exported = export.path().to_str().unwrap();
    let (host, addr) = NsHost::start(
        HOST_IP,
        &[
            "--token-file",
            token,
            "--export",
            exported,
            "--export-writable",
        ],
    );
    let egress = host.pair.host_ifname().to_string();

    let (pid, out) = osprobe(&[
        "net",
        "rtt",
        "--to",
        &addr,
        "--delay",
        "20ms",
        "--token-file",
        token,
        "--profile",
        "smoke",
        "--no-store",
        "--json",
    ]);
    let run = json_of(&out);
    let rtts = measurements(&run, "net.rtt");
    assert!(!rtts.is_empty(), "no net.rtt measurement: {run}");
    for m in &rtts {
        assert_eq!(m["params"]["path"], "emulated", "{m}");
        assert_eq!(m["params"]["to"], addr.as_str(), "{m}");
        // 20 ms each way: every round trip is at least 40 ms (in ns).
        assert!(p50(m) >= 40e6, "round trip {} ns: {m}", p50(m));
    }
    // The far end was described as a remote host.
    assert!(
        run["far_ends"].as_array().is_some_and(|a| !a.is_empty()),
        "{}",
        run["far_ends"]
    );
    assert_nothing_left(pid, &egress);

    let (pid, out) = osprobe(&[
        "net",
        "bandwidth",
        "--to",
        &addr,
        "--delay",
        "2ms",
        "--rate",
        "50mbit",
        "--token-file",
        token,
        "--profile",
        "smoke",
        "--no-store",
        "--json",
    ]);
    let run = json_of(&out);
    let bandwidth = measurements(&run, "net.bandwidth");
    assert!(!bandwidth.is_empty(), "no net.bandwidth measurement: {run}");
    assert!(p50(bandwidth[0]) > 0.0, "{}", bandwidth[0]);
    let notes = run["measurements"].to_string();
    assert!(notes.contains("in front of"), "{notes}");
    assert!(notes.contains("emulator: to the server"), "{notes}");
    assert_nothing_left(pid, &egress);

    // The file service through the same middlebox (bench takes the token).
    let to = format!("to={addr}");
    let (pid, out) = osprobe(&[
        "bench",
        "rfs.throughput",
        "--param",
        "path=emulated",
        "--param",
        &to,
        "--param",
        "delay=2ms",
        "--token-file",
        token,
        "--profile",
        "smoke",
        "--no-store",
        "--json",
    ]);
    let run = json_of(&out);
    let rfs = measurements(&run, "rfs.throughput");
    assert!(!rfs.is_empty(), "no rfs.throughput measurement: {run}");
    assert!(
        rfs[0]["notes"].to_string().contains("in front of"),
        "{}",
        rfs[0]["notes"]
    );
    assert_nothing_left(pid, &egress);
    let left: Vec<_> = std::fs::read_dir(export.path()).unwrap().collect();
    assert!(left.is_empty(), "left on the far end: {left:?}");
}

#[test]
fn emulation_without_a_path_that_emulates_is_one_line() {
    if !ready() {
        return;
    }
    let _one = serialized();
    let (_, out) = osprobe(&[
        "bench",
        "net.rtt",
        "--param",
        "path=netns",
        "--param",
        "delay=5ms",
        "--profile",
        "smoke",
        "--no-store",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("path=emulated"), "{err}");
}

#[test]
fn an_unreachable_host_is_one_line_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let _one = serialized();
    // No route at all (and so no packet leaves this machine).
    let ip = common::ip_program();
    let route = ["route", "add", "unreachable", &format!("{NOWHERE}/32")];
    let added = Command::new(&ip).args(route).status().unwrap();
    assert!(added.success());
    let (pid, out) = osprobe(&[
        "net",
        "rtt",
        "--to",
        NOWHERE,
        "--delay",
        "5ms",
        "--profile",
        "smoke",
        "--no-store",
    ]);
    let _ = Command::new(&ip)
        .args(["route", "del", "unreachable", &format!("{NOWHERE}/32")])
        .status();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(NOWHERE) && err.contains("route"), "{err}");
    assert!(tables_of(pid).is_empty());
    assert!(
        namespaces_of(pid).is_empty() || {
            std::thread::sleep(common::TEARDOWN.min(std::time::Duration::from_secs(5)));
            namespaces_of(pid).is_empty()
        }
    );
}
