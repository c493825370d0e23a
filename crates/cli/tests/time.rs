//! time.sleep and time.timers driven through the binary (smoke profile):
//! structure, units, and relations that hold on any machine (spinning
//! wakes closer to the deadline than nanosleep; nothing wakes early; every
//! timer fires), never absolute times.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, p50, skips};
use serde_json::Value;
use std::process::Command;

const STRATEGIES: [&str; 6] = [
    "nanosleep",
    "clock_nanosleep_abs",
    "timerfd",
    "epoll",
    "spin",
    "hybrid",
];

fn osprobe() -> Command {
    Command::cargo_bin("osprobe").unwrap()
}

fn smoke_run() -> Value {
    let out = osprobe()
        .args([
            "run",
            "--only",
            "time.*",
            "--profile",
            "smoke",
            "--no-store",
            "--json",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    common::assert_follows_schema(&run);
    run
}

fn min(m: &Value) -> f64 {
    m["summary"]["min"]
        .as_f64()
        .expect("summary.min is a number")
}

/// The time.sleep measurement of `strategy` at the normal policy.
fn normal<'a>(sleeps: &[&'a Value], strategy: &str) -> &'a Value {
    sleeps
        .iter()
        .find(|m| m["metric"] == strategy && m["params"]["policy"] == "other")
        .unwrap_or_else(|| panic!("time.sleep has no {strategy} at policy=other"))
}

#[test]
fn smoke_run_of_the_time_experiments() {
    let run = smoke_run();

    let sleeps = measurements(&run, "time.sleep");
    for strategy in STRATEGIES {
        let m = normal(&sleeps, strategy);
        assert_eq!(m["unit"], "ns", "{strategy}");
        assert_eq!(m["params"]["strategy"], strategy);
        assert!(m["params"]["requested"].as_i64().unwrap() > 0);
        let notes = m["notes"].to_string();
        assert!(notes.contains("timer slack"), "{strategy}: {notes}");
    }
    for m in &sleeps {
        assert!(
            min(m) >= 0.0,
            "{} woke before its deadline: {}",
            m["metric"],
            m["summary"]
        );
    }
    // Spinning reads the clock until the deadline; nanosleep pays the
    // timer slack and a wake-up. Medians, so one preemption cannot decide.
    let spin = p50(normal(&sleeps, "spin"));
    let nanosleep = p50(normal(&sleeps, "nanosleep"));
    assert!(
        spin < nanosleep,
        "spin's median error {spin} ns is not below nanosleep's {nanosleep} ns"
    );

    // The real-time point is measured as root, and otherwise skipped with
    // the reason (also as root when the container forbids SCHED_FIFO).
    let fifo: Vec<_> = sleeps
        .iter()
        .filter(|m| m["params"]["policy"] == "fifo")
        .collect();
    if fifo.is_empty() {
        let skipped = skips(&run, "time.sleep");
        assert!(
            skipped
                .iter()
                .any(|s| s["reason"].as_str().unwrap_or("").contains("fifo")),
            "the fifo point was neither measured nor skipped: {skipped:?}"
        );
    } else {
        assert!(fifo
            .iter()
            .all(|m| m["notes"].to_string().contains("SCHED_FIFO")));
    }

    let timers = measurements(&run, "time.timers");
    let points: Vec<&Value> = timers
        .iter()
        .filter(|m| m["metric"] == "fired")
        .copied()
        .collect();
    assert!(!points.is_empty(), "time.timers has no fired metric");
    for fired in points {
        assert_eq!(fired["unit"], "ratio");
        assert_eq!(
            min(fired),
            1.0,
            "not every timer fired at {}: {}",
            fired["params"],
            fired["notes"]
        );
        let params = &fired["params"];
        let n = params["timers"].as_u64().unwrap();
        let late = timers
            .iter()
            .find(|m| m["metric"] == "late" && m["params"] == *params)
            .expect("a late metric beside fired");
        assert_eq!(late["unit"], "ns");
        assert!(min(late) >= 0.0, "a timer fired early: {}", late["summary"]);
        // Every round's timers all fired, so the samples are whole rounds.
        assert_eq!(late["summary"]["n"].as_u64().unwrap() % n, 0);
        // One-shot points time the registration; periodic ones (mode=
        // absolute|rearm) register once and report their drift instead.
        let periodic = params["mode"] == "absolute" || params["mode"] == "rearm";
        let beside = if periodic { "drift" } else { "register" };
        assert!(
            timers
                .iter()
                .any(|m| m["metric"] == beside && m["params"] == *params && m["unit"] == "ns"),
            "no {beside} metric at {params}"
        );
    }
}

#[test]
fn bad_parameters_are_usage_errors_naming_what_is_accepted() {
    for (id, param, expected) in [
        ("time.sleep", "requested=0", "1 to 1000000"),
        ("time.sleep", "strategy=usleep", "clock_nanosleep_abs"),
        ("time.sleep", "policy=rr", "other, fifo"),
        ("time.timers", "timers=20000", "1 to 10000"),
    ] {
        let out = osprobe()
            .args([
                "bench",
                id,
                "--profile",
                "smoke",
                "--no-store",
                "--param",
                param,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{id} --param {param}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{id} --param {param}: {stderr}");
    }
}

#[test]
fn a_chosen_point_and_duration() {
    let out = osprobe()
        .args([
            "bench",
            "time.sleep",
            "--profile",
            "smoke",
            "--no-store",
            "--json",
            "--param",
            "strategy=hybrid",
            "--param",
            "requested=50",
            "--param",
            "policy=other",
            "--param",
            "slack_ns=1",
            "--param",
            "duration_ms=30",
        ])
        .output()
        .unwrap();
    let run = json_of(&out);
    let sleeps = measurements(&run, "time.sleep");
    assert_eq!(sleeps.len(), 1, "one point: {sleeps:?}");
    let m = sleeps[0];
    assert_eq!(m["metric"], "hybrid");
    assert_eq!(m["params"]["slack_ns"], 1);
    assert!(m["notes"]
        .to_string()
        .contains("timer slack of this thread: 1 ns"));
    assert!(m["histogram"]["counts"].is_array() || min(m) == 0.0);
}
