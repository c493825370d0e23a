//! The network experiments, `serve` and `send`, driven through the binary.
//! Traffic goes to 127.0.0.1 or to osprobe-* namespaces the binary builds.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{interrupt, json_of, measurements, need_root, osprobe_namespaces, p50};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN");
    cmd
}

#[test]
fn smoke_run_of_every_network_experiment() {
    let out = osprobe()
        .args([
            "run",
            "--only",
            "net.*",
            "--profile",
            "smoke",
            "--no-store",
            "--json",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    common::assert_follows_schema(&run);
    for (experiment, metrics) in [
        ("net.rtt", &["tcp", "udp"][..]),
        ("net.connect", &["connect", "close"][..]),
        ("net.bandwidth", &["sender", "receiver", "retransmits"][..]),
        ("net.transfer.file_size", &["tx", "rx"][..]),
        ("net.transfer.packet_size", &["tx", "rx"][..]),
        ("net.transfer.connections", &["tx", "rx"][..]),
        (
            "net.ack_stall",
            &["delayed_ack", "quickack", "ratio", "ack_delay"][..],
        ),
    ] {
        let ms = measurements(&run, experiment);
        for metric in metrics {
            assert!(
                ms.iter().any(|m| m["metric"] == *metric),
                "{experiment} has no {metric}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for m in &ms {
            assert!(p50(m).is_finite() && p50(m) >= 0.0, "{experiment} {m}");
        }
    }
    // Robust relations only: a round trip is positive, setup costs more
    // than nothing, the receiver got what the sender sent.
    let rtt = measurements(&run, "net.rtt");
    assert!(rtt.iter().all(|m| p50(m) > 0.0 && m["unit"] == "ns"));
    let bw = measurements(&run, "net.bandwidth");
    assert!(bw
        .iter()
        .filter(|m| m["metric"] == "receiver")
        .all(|m| p50(m) > 0.0));
    // Every TCP bulk result carries a diagnosis line.
    assert!(bw
        .iter()
        .filter(|m| m["metric"] == "sender")
        .all(|m| m["notes"].as_array().unwrap().iter().any(|n| {
            let n = n.as_str().unwrap();
            n.starts_with("limited by") || n.starts_with("limit unknown")
        })));
    // net.cc: one point per congestion control the kernel offers.
    let cc = measurements(&run, "net.cc");
    for metric in ["throughput", "min_rtt", "retransmits", "cwnd"] {
        assert!(
            cc.iter().any(|m| m["metric"] == metric),
            "net.cc has no {metric}"
        );
    }
    // Its diagnosis line is on the throughput.
    assert!(cc
        .iter()
        .filter(|m| m["metric"] == "throughput")
        .all(|m| m["notes"].to_string().contains("limit")));
}

#[test]
fn ack_stall_shows_the_stall_and_the_cure() {
    let out = osprobe()
        .args([
            "net",
            "ack_stall",
            "--profile",
            "smoke",
            "--no-store",
            "--json",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    let ms = measurements(&run, "net.ack_stall");
    let ratio = ms.iter().find(|m| m["metric"] == "ratio").unwrap();
    assert!(
        p50(ratio) > 10.0,
        "QUICKACK should beat delayed ACKs by far: {ratio}"
    );
    let delay = ms.iter().find(|m| m["metric"] == "ack_delay").unwrap();
    let notes = delay["notes"].to_string();
    assert!(notes.contains("delayed-ACK interval observed"), "{notes}");
}

/// `osprobe serve` on a free loopback port; returns it and its address.
struct ServeProcess {
    child: Option<Child>,
    addr: String,
    log: std::thread::JoinHandle<String>,
}

impl ServeProcess {
    fn start(extra: &[&str]) -> ServeProcess {
        let mut child = osprobe()
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        // Keep reading the log so the server never writes into a full pipe.
        let log = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
            rest
        });
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in: {line}"))
            .to_string();
        ServeProcess {
            child: Some(child),
            addr,
            log,
        }
    }

    /// Ctrl-C; the server must exit 0 and leave its log.
    fn stop(mut self) -> String {
        let child = self.child.take().unwrap();
        // SAFETY: plain kill(2) of our own child, which has not been reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "serve exits 0 on Ctrl-C: {:?}",
            out.status
        );
        std::mem::replace(&mut self.log, std::thread::spawn(String::new))
            .join()
            .unwrap()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("osprobe-nettest-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pseudo_random_file(path: &Path, size: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn send_delivers_a_verified_copy_and_the_server_refuses_what_it_must() {
    let root = scratch("send");
    let (src, dst) = (root.join("src"), root.join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let file = src.join("data.bin");
    pseudo_random_file(&file, 3 << 20);
    let serve = ServeProcess::start(&["--dir", dst.to_str().unwrap(), "--token", "s3cret"]);

    // Right token: arrives byte-identical, Tx and Rx reported.
    let out = osprobe()
        .args([
            "send",
            file.to_str().unwrap(),
            "--to",
            &serve.addr,
            "--token",
            "s3cret",
            "--json",
        ])
        .output()
        .unwrap();
    let outcome = json_of(&out);
    common::assert_follows("send.schema.json", &outcome);
    assert_eq!(outcome["verified"], Value::Bool(true));
    assert_eq!(outcome["bytes"], 3 << 20);
    assert!(outcome["tx_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(outcome["rx_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        std::fs::read(dst.join("data.bin")).unwrap(),
        std::fs::read(&file).unwrap()
    );

    // Packets method, another name, from the token in the environment.
    let out = osprobe()
        .env("OSPROBE_TOKEN", "s3cret")
        .args([
            "send",
            file.to_str().unwrap(),
            "--to",
            &serve.addr,
            "--name",
            "copy.bin",
        ])
        .args(["--method", "packets", "--packet", "1000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Tx (sender") && text.contains("Rx (receiver)"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(dst.join("copy.bin")).unwrap(),
        std::fs::read(&file).unwrap()
    );

    let refused = |args: &[&str], expect: &str| {
        let out = osprobe()
            .args(["send", file.to_str().unwrap(), "--to", &serve.addr])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(expect),
            "{args:?}: expected '{expect}' in: {err}"
        );
    };
    refused(&["--token", "wrong"], "wrong token");
    refused(&[], "requires a token");
    refused(
        &["--token", "s3cret", "--name", "../escape.bin"],
        "../escape.bin",
    );
    refused(
        &["--token", "s3cret", "--name", "/etc/passwd"],
        "/etc/passwd",
    );
    refused(&["--token", "s3cret"], "exists"); // no silent overwrite
    assert!(!root.join("escape.bin").exists());

    // Nothing partial or stray in the directory: exactly the two files.
    let mut names: Vec<String> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["copy.bin", "data.bin"]);

    let log = serve.stop();
    assert!(log.contains("verified"), "{log}");
    assert!(log.contains("wrong token"), "{log}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn usage_errors_and_unreachable_servers_are_explained() {
    let out = osprobe()
        .args(["serve", "--bind", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ADDR:PORT"));
    let out = osprobe()
        .args(["serve", "--dir", "/no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = osprobe().args(["net", "warp-speed"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rtt"));
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let to = format!("127.0.0.1:{port}");
    let out = osprobe()
        .args([
            "net",
            "rtt",
            "--to",
            &to,
            "--profile",
            "smoke",
            "--no-store",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("osprobe serve") && err.contains(&to), "{err}");
    let out = osprobe()
        .args(["send", "/no/such/file", "--to", &to])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file"));
}

#[test]
fn remote_path_against_a_serve_process() {
    let serve = ServeProcess::start(&["--token", "t0ken"]);
    let out = osprobe()
        .args(["net", "rtt", "--to", &serve.addr, "--token", "t0ken"])
        .args([
            "--profile",
            "smoke",
            "--no-store",
            "--json",
            "--param",
            "proto=tcp",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    let rtt = measurements(&run, "net.rtt");
    assert_eq!(rtt.len(), 1);
    assert_eq!(rtt[0]["params"]["path"], "remote");
    // The token is not stored anywhere in the run.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("t0ken"));
    serve.stop();
}

#[test]
fn netns_path_measures_and_cleans_up() {
    if !need_root("netns_path_measures_and_cleans_up") {
        return;
    }
    let out = osprobe()
        .args([
            "net",
            "transfer.file_size",
            "--netns",
            "--profile",
            "smoke",
            "--no-store",
            "--json",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    let ms = measurements(&run, "net.transfer.file_size");
    assert!(ms.iter().all(|m| m["params"]["path"] == "netns"));
    assert!(ms
        .iter()
        .any(|m| m["notes"].to_string().contains("netns osprobe-")));
    let pid_names: Vec<String> = osprobe_namespaces();
    // The binary's namespaces carry its pid in hex; it has exited, so a
    // sweep by anyone may have removed leftovers, but it must not leave
    // any: none may remain that name a dead process.
    for name in pid_names {
        let hex = &name["osprobe-".len()..name.len().saturating_sub(1)];
        if let Ok(pid) = u32::from_str_radix(hex, 16) {
            assert!(
                Path::new(&format!("/proc/{pid}")).exists(),
                "left behind: {name}"
            );
        }
    }
}

#[test]
fn ctrl_c_during_a_netns_test_removes_the_namespace() {
    if !need_root("ctrl_c_during_a_netns_test_removes_the_namespace") {
        return;
    }
    let child = osprobe()
        .args([
            "net",
            "bandwidth",
            "--netns",
            "--profile",
            "smoke",
            "--no-store",
        ])
        .args(["--param", "duration_ms=20000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(1500));
    let prefix = format!("osprobe-{pid:x}");
    assert!(
        osprobe_namespaces().iter().any(|n| n.starts_with(&prefix)),
        "the namespace should exist while measuring"
    );
    interrupt(child, "net bandwidth --netns");
    let left: Vec<String> = osprobe_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_full_disk_on_the_server_is_reported_and_leaves_nothing() {
    if !need_root("a_full_disk_on_the_server_is_reported_and_leaves_nothing") {
        return;
    }
    let root = scratch("full");
    let small = root.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "tmpfs",
            small.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a 1 MiB tmpfs");
    let file = root.join("big.bin");
    pseudo_random_file(&file, 3 << 20);
    let serve = ServeProcess::start(&["--dir", small.to_str().unwrap()]);
    let out = osprobe()
        .args(["send", file.to_str().unwrap(), "--to", &serve.addr])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let left: Vec<_> = std::fs::read_dir(&small).unwrap().collect();
    drop(serve);
    let _ = Command::new("umount").arg(&small).status();
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("space"), "{err}");
    assert!(left.is_empty(), "nothing may be left in the full directory");
}

/// The namespaces of the process `pid` (names carry its pid in hex).
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("osprobe-{pid:x}");
    osprobe_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix) && n.len() == prefix.len() + 1)
        .collect()
}

#[test]
fn emulated_path_adds_its_delay_and_cleans_up() {
    if !need_root("emulated_path_adds_its_delay_and_cleans_up") {
        return;
    }
    let child = osprobe()
        .args(["net", "rtt", "--delay", "10ms", "--loss", "0%"])
        .args(["--profile", "smoke", "--no-store", "--json"])
        .args(["--param", "proto=tcp"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let run = json_of(&out);
    let rtt = measurements(&run, "net.rtt");
    assert_eq!(rtt.len(), 1, "{run}");
    assert_eq!(rtt[0]["params"]["path"], "emulated");
    assert_eq!(rtt[0]["params"]["delay"], "10ms");
    // 10 ms each way: a round trip can be longer, never shorter.
    let median_ns = p50(rtt[0]);
    assert!(median_ns >= 20e6, "round trip {median_ns} ns under 20 ms");
    assert!(rtt[0]["notes"].to_string().contains("emulated link"));
    assert!(
        namespaces_of(pid).is_empty(),
        "left: {:?}",
        namespaces_of(pid)
    );
}

#[test]
fn emulated_bulk_test_reports_the_link_and_buffers() {
    if !need_root("emulated_bulk_test_reports_the_link_and_buffers") {
        return;
    }
    let out = osprobe()
        .args([
            "net", "cc", "--delay", "2ms", "--loss", "1%", "--rate", "50mbit",
        ])
        .args(["--wmem", "8M", "--profile", "smoke", "--no-store", "--json"])
        .args(["--param", "cc=cubic"])
        .output()
        .unwrap();
    let run = json_of(&out);
    let cc = measurements(&run, "net.cc");
    let throughput = cc
        .iter()
        .find(|m| m["metric"] == "throughput")
        .unwrap_or_else(|| panic!("no throughput: {run}"));
    // The bottleneck bounds what is acknowledged, with a margin for the
    // burstiness of acknowledgements within one sample interval.
    assert!(p50(throughput) <= 50e6 * 1.2, "{throughput}");
    let notes = throughput["notes"].to_string();
    assert!(notes.contains("tcp_wmem 4096 16384 8388608"), "{notes}");
    assert!(notes.contains("lost"), "{notes}");
    assert!(notes.contains("1% loss towards the server"), "{notes}");
}

#[test]
fn bad_link_values_are_usage_errors() {
    for (flag, value, expected) in [
        ("--delay", "fast", "50ms"),
        ("--loss", "150%", "percentage"),
        ("--rate", "100mb", "mbit"),
    ] {
        let out = osprobe()
            .args(["net", "rtt", flag, value, "--no-store"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(value) && err.contains(expected), "{err}");
    }
    let out = osprobe()
        .args(["net", "rtt", "--delay", "5ms", "--netns", "--no-store"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A link parameter on a path without the emulator is refused, not ignored.
    let out = osprobe()
        .args(["net", "rtt", "--param", "delay=5ms", "--profile", "smoke"])
        .args(["--no-store"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("path=emulated"));
}
