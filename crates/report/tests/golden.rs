//! Golden tests of the terminal output: a fixed, synthetic run (nothing is
//! measured) rendered at 80 and 200 columns and compared with the files in
//! tests/golden/. After an intended change of layout, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p osprobe-report --test golden` and read
//! the diff before committing.

use osprobe_core::model::{Prediction, Skipped};
use osprobe_core::{Environment, Measurement, Params, Profile, Run, Summary, Unit};
use osprobe_report::{brief_results, run_results};
use std::path::PathBuf;

fn summary(p50: f64, spread: f64) -> Summary {
    let samples: Vec<f64> = (0..50)
        .map(|i| p50 * (1.0 + spread * (f64::from(i) - 25.0) / 25.0))
        .collect();
    Summary::of(&samples).unwrap()
}

/// A run shaped like a real one: CPU-bound rows with cycles, a network
/// experiment with a long parameter set, a model, notes that differ only
/// in numbers, skipped points.
fn synthetic_run() -> Run {
    let mut measurements = Vec::new();
    for (call, ns, overhead) in [("getppid", 63.2, 12.5), ("getuid", 61.9, 13.25)] {
        let mut m = Measurement::new(
            "cpu.syscall",
            call,
            Params::new().with("call", call),
            Unit::Nanoseconds,
            summary(ns, 0.02),
        )
        .note(format!(
            "clock read cost subtracted: {overhead:.2} ns per timed batch"
        ))
        .note("measured on CPU 0, pinned");
        m.cycles = Some(m.summary.scaled(2.3));
        measurements.push(m);
    }
    for (delay, rtt) in [(0, 21_500.0), (5_000_000, 10_080_000.0)] {
        let params = Params::new()
            .with("path", "emulated")
            .with("delay", delay)
            .with("loss", "0.1%")
            .with("rate", "100mbit")
            .with("size", 65_536)
            .with("wmem", 4 << 20);
        let mut m = Measurement::new("net.rtt", "rtt", params, Unit::Nanoseconds, summary(rtt, 0.3))
            .note(format!(
                "{} round trips over the emulated link; noisy: coefficient of variation {}% without outliers",
                200,
                if delay == 0 { 17 } else { 31 }
            ));
        m.prediction = Some(
            Prediction::new(2.0 * delay as f64 + 20_000.0, "2 x delay + loopback RTT").within(0.25),
        );
        measurements.push(m);
    }
    measurements.push(
        Measurement::new(
            "net.bandwidth",
            "receiver",
            Params::new().with("path", "loopback"),
            Unit::BytesPerSecond,
            summary(2.45e9, 0.05),
        )
        .note("one TCP stream, 1 s"),
    );
    let skip = |experiment: &str, params: Params, reason: &str| Skipped {
        experiment: experiment.into(),
        params,
        reason: reason.into(),
    };
    Run {
        schema: 1,
        id: "20260101-000000-abcd".into(),
        started: "2026-01-01T00:00:00Z".into(),
        ended: "2026-01-01T00:01:00Z".into(),
        osprobe_version: "0.0.0".into(),
        profile: Profile::Quick,
        command: "run".into(),
        environment: Environment::default(),
        measurements,
        skipped: vec![
            skip(
                "pager.fault",
                Params::new().with("backend", "rfs"),
                "needs root",
            ),
            skip(
                "pager.fault",
                Params::new().with("backend", "local"),
                "needs root",
            ),
            skip("net.cc", Params::new(), "needs root"),
            skip(
                "cpu.timer_overhead",
                Params::new().with("clock", "rdtsc"),
                "rdtsc needs an invariant TSC (the kernel marked the TSC unstable)",
            ),
        ],
        labels: Default::default(),
        far_ends: Vec::new(),
    }
}

/// Compare `actual` with tests/golden/`name`, or write it with UPDATE_GOLDEN=1.
fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs (UPDATE_GOLDEN=1 regenerates it); got:\n{actual}",
        path.display()
    );
}

fn assert_fits(out: &str, width: usize) {
    for line in out.lines() {
        assert!(
            line.chars().count() <= width,
            "line of {} columns at width {width}: {line:?}",
            line.chars().count()
        );
    }
}

#[test]
fn the_run_at_80_columns() {
    let out = run_results(&synthetic_run(), 80);
    assert_fits(&out, 80);
    // Parameters wrap rather than vanish; the table keeps median and unit.
    assert!(out.contains("wmem=4M"), "{out}");
    assert!(out.contains("median") && out.contains("unit"), "{out}");
    check_golden("run_80.txt", &out);
}

#[test]
fn the_run_at_200_columns() {
    let out = run_results(&synthetic_run(), 200);
    assert_fits(&out, 200);
    // Wide enough for every column that has a value, params on one line.
    for column in ["95% CI", "min", "p99", "cycles", "model", "outliers"] {
        assert!(out.contains(column), "{column}: {out}");
    }
    // Shared parameters once in the heading, the varying one in the rows.
    assert!(
        out.contains("net.rtt (all rows: loss=0.1% path=emulated rate=100mbit size=64K wmem=4M)"),
        "{out}"
    );
    assert!(out.contains("  rtt       delay=5000000 "), "{out}");
    check_golden("run_200.txt", &out);
}

#[test]
fn brief_output_at_80_columns() {
    let out = brief_results(&synthetic_run(), 80);
    assert_fits(&out, 80);
    assert_eq!(out.matches("cpu.syscall").count(), 1, "{out}");
    check_golden("brief_80.txt", &out);
}

#[test]
fn no_width_breaks_the_layout() {
    let run = synthetic_run();
    for width in [40, 60, 100, 120, 160] {
        assert_fits(&run_results(&run, width), width);
        assert_fits(&brief_results(&run, width), width);
    }
}
