//! mem.latency and mem.caches through the binary, with the smoke profile.
//! Robust relations only (latency grows with the working set, the inferred
//! L1 is near what sysfs reports, units are right), never absolute times:
//! the machine is shared and noisy.

use assert_cmd::Command;
use serde_json::Value;
use std::sync::OnceLock;

mod common;
use common::{json_of, measurements, p50 as median};

/// One smoke run of both experiments, not stored, shared by the tests.
fn smoke_run() -> &'static Value {
    static RUN: OnceLock<Value> = OnceLock::new();
    RUN.get_or_init(|| {
        let out = Command::cargo_bin("osprobe")
            .unwrap()
            .args([
                "--quiet",
                "run",
                "--only",
                "mem.latency,mem.caches",
                "--profile",
                "smoke",
                "--json",
                "--no-store",
            ])
            .output()
            .unwrap();
        json_of(&out)
    })
}

/// A mem.caches metric, if it was inferred.
fn caches_metric(run: &Value, metric: &str) -> Option<f64> {
    measurements(run, "mem.caches")
        .into_iter()
        .find(|m| m["metric"] == metric)
        .map(median)
}

/// The random-chain latency at one working-set size.
fn latency_at(run: &Value, size: u64) -> f64 {
    measurements(run, "mem.latency")
        .into_iter()
        .find(|m| m["params"]["size"] == size && m["params"]["pattern"] == "random")
        .map(median)
        .unwrap_or_else(|| panic!("mem.latency at {size} B missing"))
}

#[test]
fn every_measurement_has_the_right_unit() {
    let run = smoke_run();
    assert!(
        run["skipped"].as_array().unwrap().is_empty(),
        "{}",
        run["skipped"]
    );
    let tsc = run["environment"]["clock"]["source"] == "tsc";
    let latency = measurements(run, "mem.latency");
    assert!(latency.len() >= 3, "smoke measures a few sizes");
    for m in latency {
        assert_eq!(m["metric"], "load");
        assert_eq!(m["unit"], "ns");
        assert_eq!(m["cycles"].is_object(), tsc, "cycles exactly with the TSC");
        assert!(median(m) > 0.0);
        let notes = m["notes"].to_string();
        assert!(notes.contains("transparent huge pages"), "THP state noted");
    }
    let caches = measurements(run, "mem.caches");
    assert!(!caches.is_empty());
    for m in caches {
        let metric = m["metric"].as_str().unwrap();
        let unit = if metric.ends_with("_size") {
            "bytes"
        } else if metric.ends_with("_latency") {
            "ns"
        } else {
            panic!("unexpected mem.caches metric {metric}")
        };
        assert_eq!(m["unit"], unit, "{metric}");
        assert!(median(m) > 0.0, "{metric}");
        if unit == "bytes" {
            assert!(
                !m["notes"].as_array().unwrap().is_empty(),
                "{metric}: evidence in the notes"
            );
        }
    }
}

#[test]
fn latency_rises_with_the_working_set() {
    let run = smoke_run();
    let small = latency_at(run, 4096);
    let largest = measurements(run, "mem.latency")
        .into_iter()
        .filter(|m| m["params"]["pattern"] == "random")
        .map(|m| m["params"]["size"].as_u64().unwrap())
        .max()
        .unwrap();
    let large = latency_at(run, largest);
    assert!(
        large > 3.0 * small,
        "{largest} B ({large} ns) should be far slower than 4 KiB ({small} ns)"
    );

    // Across the levels mem.caches detected, each slower than the one before.
    let levels: Vec<(&str, f64)> = ["l1_latency", "l2_latency", "l3_latency", "memory_latency"]
        .into_iter()
        .filter_map(|m| caches_metric(run, m).map(|v| (m, v)))
        .collect();
    assert!(
        levels.len() >= 2,
        "at least L1 and one more level: {levels:?}"
    );
    for pair in levels.windows(2) {
        assert!(pair[1].1 > pair[0].1, "{levels:?}");
    }
    let l1 = caches_metric(run, "l1_latency").expect("an L1 level");
    let memory = caches_metric(run, "memory_latency").expect("the sweep reaches memory");
    assert!(
        memory > 5.0 * l1,
        "memory ({memory} ns) should be far slower than L1 ({l1} ns)"
    );
}

#[test]
fn inferred_l1_is_near_sysfs() {
    let run = smoke_run();
    let Some(sysfs) = run["environment"]["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["level"] == 1 && c["kind"] == "Data")
        .and_then(|c| c["size_bytes"].as_f64())
    else {
        osprobe_core::testing::skip("sysfs reports no L1d cache here: nothing to compare");
        return;
    };
    let inferred = caches_metric(run, "l1_size").expect("an L1 knee");
    assert!(
        inferred >= sysfs / 2.0 && inferred <= sysfs * 2.0,
        "inferred L1 {inferred} B vs sysfs {sysfs} B"
    );
    if let Some(line) = caches_metric(run, "line_size") {
        assert!((line as u64).is_power_of_two(), "line size {line}");
    }
}

#[test]
fn bad_parameters_get_clear_errors() {
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .args([
            "--quiet",
            "bench",
            "mem.latency",
            "--profile",
            "smoke",
            "--no-store",
            "--param",
            "pattern=stride",
            "--param",
            "stride=12",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple of 8"), "{err}");

    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .args([
            "--quiet",
            "bench",
            "mem.latency",
            "--profile",
            "smoke",
            "--no-store",
            "--param",
            "size=100",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("size") && err.contains("1K"), "{err}");
}
