//! Relations between measurements that must hold whatever the machine:
//! behaviour with generous margins, never absolute times.

mod common;

use assert_cmd::Command;
use common::{json_of, measurements, p50};
use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .arg("--db")
        .arg(dir.path().join("runs.db"))
        .args(["--quiet", "bench"])
        .args(args)
        .args(["--json", "--no-store"])
        .output()
        .unwrap();
    json_of(&out)
}

/// A call with fewer arguments never costs more than one with more (issue
/// 20 item 6: a build once read 2.16 ns for 0 arguments and 1.23 ns for 1
/// and 2, another 1.67 ns for 6 and 1.00 ns for 7, from where the compiler
/// placed each callee and loop). Beyond 50% is a layout or method defect,
/// not noise: the first point is measured first, as in a run.
#[test]
fn fewer_call_arguments_never_cost_more() {
    let run = bench(&["cpu.call_overhead", "--profile", "smoke"]);
    let mut cost: Vec<(i64, f64)> = measurements(&run, "cpu.call_overhead")
        .iter()
        .map(|m| (m["params"]["args"].as_i64().unwrap(), p50(m)))
        .collect();
    cost.sort_by_key(|&(args, _)| args);
    assert_eq!(cost.len(), 8, "{cost:?}");
    // Sub-nanosecond figures: an absolute slack of 0.2 ns beside the 50%.
    for (i, &(fewer, a)) in cost.iter().enumerate() {
        for &(more, b) in &cost[i + 1..] {
            assert!(
                a <= b * 1.5 + 0.2,
                "{fewer} arguments cost {a:.2} ns, {more} cost {b:.2} ns: {cost:?}"
            );
        }
    }
}

/// Counters are said once per run and attached to CPU-bound measurements
/// only; no cycles figure appears unless the PMU counted it.
#[test]
fn counters_are_noted_once_and_never_invent_cycles() {
    let run = bench(&["cpu.syscall", "--profile", "smoke"]);
    let notes: Vec<&str> = run["environment"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| n.starts_with("performance counters:"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let counted_cycles = notes[0].contains("hardware cycles");
    for m in measurements(&run, "cpu.syscall") {
        let counters = m["counters"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = counters
            .iter()
            .filter_map(|c| c["event"].as_str())
            .collect();
        assert_eq!(
            names.contains(&"cycles"),
            counted_cycles,
            "{names:?} {notes:?}"
        );
        if notes[0].contains("software task-clock") {
            assert!(names.contains(&"task-clock"), "{names:?}");
        }
    }
    common::assert_follows_schema(&run);
}
