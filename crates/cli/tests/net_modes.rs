//! The network modes (net.udp, net.rr, net.loaded_latency, net.bandwidth
//! direction=reverse|bidir) driven through the binary with the smoke
//! profile. Traffic goes to 127.0.0.1 or through the link emulator's
//! osprobe-* namespaces.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, need_root, p50};
use serde_json::Value;
use std::process::Command;

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN");
    cmd
}

fn metric<'a>(ms: &[&'a Value], name: &str, filter: &str) -> &'a Value {
    ms.iter()
        .find(|m| m["metric"] == name && m["params"].to_string().contains(filter))
        .unwrap_or_else(|| panic!("no {name} ({filter}) in {ms:?}"))
}

fn run(args: &[&str]) -> Value {
    let out = osprobe()
        .args(args)
        .args(["--profile", "smoke", "--no-store", "--json"])
        .output()
        .unwrap();
    json_of(&out)
}

#[test]
fn udp_counts_what_arrived_and_the_small_packet_rate() {
    let run = run(&["net", "udp"]);
    common::assert_follows_schema(&run);
    let ms = measurements(&run, "net.udp");
    for size in ["\"size\":1460", "\"size\":64"] {
        let received = metric(&ms, "received", size);
        assert!(p50(received) > 0.0, "{received}");
        let loss = p50(metric(&ms, "loss", size));
        assert!((0.0..=1.0).contains(&loss), "loss {loss}");
        assert!(p50(metric(&ms, "jitter", size)) >= 0.0);
        assert!(p50(metric(&ms, "reordered", size)) >= 0.0);
        assert!(p50(metric(&ms, "packets_per_s", size)) > 0.0);
    }
    // The offered rate bounds what the sender sent, with room for pacing.
    let sent = p50(metric(&ms, "sent", "100mbit"));
    assert!(sent <= 100e6 / 8.0 * 1.1, "sent {sent} B/s at 100 Mbit/s");
}

#[test]
fn rr_and_crr_count_transactions_and_a_connection_costs_more() {
    let run = run(&["net", "rr"]);
    let ms = measurements(&run, "net.rr");
    let rr = metric(&ms, "latency", "\"rr\"");
    let crr = metric(&ms, "latency", "\"crr\"");
    assert!(p50(metric(&ms, "transactions_per_s", "\"rr\"")) > 0.0);
    assert!(p50(metric(&ms, "transactions_per_s", "\"crr\"")) > 0.0);
    // A new connection per transaction adds the handshake and the close.
    assert!(p50(crr) > p50(rr), "crr {} ns, rr {} ns", p50(crr), p50(rr));
}

#[test]
fn loaded_latency_reports_idle_and_loaded_round_trips() {
    let run = run(&["net", "loaded_latency"]);
    let ms = measurements(&run, "net.loaded_latency");
    for name in ["idle_rtt", "loaded_rtt", "bulk_receiver"] {
        assert!(p50(metric(&ms, name, "streams")) > 0.0, "{name}");
    }
}

#[test]
fn bandwidth_reverse_and_bidir() {
    let run = run(&[
        "net",
        "bandwidth",
        "--param",
        "direction=reverse,bidir",
        "--param",
        "streams=1",
    ]);
    let ms = measurements(&run, "net.bandwidth");
    let reverse = metric(&ms, "receiver", "reverse");
    assert!(p50(reverse) > 0.0);
    assert!(reverse["notes"].to_string().contains("the server sends"));
    let up = p50(metric(&ms, "up_receiver", "bidir"));
    let down = p50(metric(&ms, "down_receiver", "bidir"));
    let sum = p50(metric(&ms, "sum_receiver", "bidir"));
    assert!(up > 0.0 && down > 0.0);
    assert!(
        (sum - (up + down)).abs() <= 1e-6 * sum,
        "{sum} != {up} + {down}"
    );
}

#[test]
fn iperf3_direction_flags_set_the_direction_and_are_refused_elsewhere() {
    let run = run(&["net", "bandwidth", "-R", "--param", "streams=1"]);
    let ms = measurements(&run, "net.bandwidth");
    assert!(!ms.is_empty());
    for m in &ms {
        assert_eq!(m["params"]["direction"], "reverse", "{m}");
    }
    for (args, expected) in [
        (&["net", "rtt", "-R"][..], "has no direction"),
        (
            &[
                "net",
                "bandwidth",
                "--bidir",
                "--param",
                "direction=reverse",
            ][..],
            "give one or the other",
        ),
        (&["net", "bandwidth", "-R", "--bidir"][..], "cannot be used"),
    ] {
        let out = osprobe().args(args).arg("--no-store").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn bad_mode_values_are_refused_with_what_is_accepted() {
    for (test, param, expected) in [
        ("udp", "bitrate=fast", "bitrate"),
        ("bandwidth", "direction=sideways", "reverse"),
        ("rr", "mode=udp_rr", "crr"),
        ("udp", "size=8", "size"),
    ] {
        let out = osprobe()
            .args(["net", test, "--param", param, "--no-store"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{test} {param} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{test} {param}: {err}");
    }
}

#[test]
fn through_the_emulator_a_bottleneck_queue_delays_the_probe_and_loss_shows_in_udp() {
    if !need_root("through_the_emulator_a_bottleneck_queue_delays_the_probe_and_loss_shows_in_udp")
    {
        return;
    }
    let run_ll = run(&[
        "net",
        "loaded_latency",
        "--delay",
        "2ms",
        "--rate",
        "20mbit",
    ]);
    let ms = measurements(&run_ll, "net.loaded_latency");
    let idle = p50(metric(&ms, "idle_rtt", "emulated"));
    let loaded = metric(&ms, "loaded_rtt", "emulated");
    // The bulk flows fill the bottleneck's queue: the probe waits behind it.
    assert!(p50(loaded) > idle, "loaded {} <= idle {idle}", p50(loaded));
    assert!(loaded["prediction"].is_object(), "{loaded}");

    let run_udp = run(&[
        "net",
        "udp",
        "--delay",
        "1ms",
        "--loss",
        "20%",
        "--param",
        "size=1460",
        "--param",
        "bitrate=20mbit",
    ]);
    let ms = measurements(&run_udp, "net.udp");
    let loss = p50(metric(&ms, "loss", "emulated"));
    // 20% of several hundred datagrams: never none, never all.
    assert!(loss > 0.05 && loss < 0.5, "loss {loss}");
}
