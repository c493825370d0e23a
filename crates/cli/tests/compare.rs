//! `osprobe compare` and `osprobe reproduce` through the binary: exit codes
//! for CI (0 nothing regressed, 1 a regression, 2 a usage error), the
//! comparison of real stored runs, and the reproduce table against the
//! reference data.

use assert_cmd::Command;
use osprobe_store::{Access, Store};
use serde_json::Value;
use std::path::Path;

mod common;

fn osprobe(db: &Path) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.arg("--db").arg(db).arg("--quiet");
    cmd
}

fn smoke_cpu_run(db: &Path) {
    let out = osprobe(db)
        .args(["run", "--profile", "smoke", "--only", "cpu.*", "--json"])
        .output()
        .unwrap();
    common::json_of(&out);
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A store with two smoke runs of the cpu experiments.
fn two_runs() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    smoke_cpu_run(&db);
    smoke_cpu_run(&db);
    (dir, db)
}

/// Store a copy of the latest run with every time `factor` times larger
/// (medians and intervals), under a new id; returns that id.
fn store_scaled_copy(db: &Path, factor: f64) -> String {
    let mut store = Store::open(db, Access::Write).unwrap();
    let mut run = store.load_run("latest").unwrap();
    let last = if run.id.ends_with('Z') { "Y" } else { "Z" };
    run.id = format!("{}{last}", &run.id[..run.id.len() - 1]);
    run.started = "2999-01-01T00:00:00.000Z".into();
    for m in &mut run.measurements {
        m.summary = m.summary.scaled(factor);
        m.cycles = None;
    }
    store.save_run(&run).unwrap();
    run.id
}

#[test]
fn two_real_runs_compare_and_a_run_against_itself_is_unchanged() {
    let (_dir, db) = two_runs();
    let out = osprobe(&db)
        .args(["compare", "latest~1", "latest", "--json"])
        .output()
        .unwrap();
    // Two real runs on a shared machine may differ either way; the exit
    // code must be 0 or 1 and agree with the regressions counted.
    let code = out.status.code().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    common::assert_follows("compare.schema.json", &json);
    let regressions = json["regressions"].as_u64().unwrap();
    assert_eq!(
        code,
        if regressions > 0 { 1 } else { 0 },
        "{}",
        stderr(&out)
    );
    let pairs = json["pairs"].as_array().unwrap();
    assert!(pairs.len() >= 10, "{pairs:?}");
    assert!(pairs.iter().any(|p| p["experiment"] == "cpu.syscall"
        && p["metric"] == "getppid"
        && p["better"] == "lower"));
    for p in pairs {
        assert!(
            ["improved", "regressed", "changed", "unchanged", "noise"]
                .contains(&p["verdict"].as_str().unwrap()),
            "{p}"
        );
    }
    assert_eq!(json["threshold"], 0.05);
    assert!(json["environment"].as_array().unwrap().is_empty());

    let out = osprobe(&db)
        .args(["compare", "latest", "latest"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("0 improved, 0 regressed, 0 changed"),
        "{text}"
    );
    assert!(
        text.contains("cpu.syscall") && text.contains("verdict"),
        "{text}"
    );
}

#[test]
fn a_slower_run_is_a_regression_and_exits_1() {
    let (_dir, db) = two_runs();
    let base = Store::open(&db, Access::Read)
        .unwrap()
        .resolve_id("latest")
        .unwrap();
    let slower = store_scaled_copy(&db, 2.0);
    let out = osprobe(&db)
        .args(["compare", &base, &slower])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("regressed") && text.contains("+100%"),
        "{text}"
    );
    // The other way round it improved; a threshold above the change hides it.
    let out = osprobe(&db)
        .args(["compare", &slower, &base])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("improved"));
    let out = osprobe(&db)
        .args(["compare", &base, &slower, "--threshold", "150%"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = osprobe(&db)
        .args([
            "compare",
            "latest~1",
            "latest",
            "--threshold",
            "0.5",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["regressions"].as_u64().unwrap() > 0);
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("none.db");
    for args in [vec!["compare", "latest", "latest"], vec!["reproduce"]] {
        let out = osprobe(&empty).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("nothing has been stored yet"),
            "{}",
            stderr(&out)
        );
    }
    let db = dir.path().join("results.db");
    smoke_cpu_run(&db);
    let cases: &[(&[&str], &str)] = &[
        (&["compare", "latest", "NOPE"], "no run matches 'NOPE'"),
        (&["compare", "latest~5", "latest"], "'latest~5'"),
        (
            &["compare", "latest", "latest", "--threshold", "abc"],
            "'abc'",
        ),
        (
            &["compare", "latest", "latest", "--threshold", "150"],
            "write 150% for a percentage",
        ),
        (&["reproduce", "--study", "9"], "--study '9'"),
        (&["reproduce", "NOPE"], "no run matches 'NOPE'"),
    ];
    for (args, expected) in cases {
        let out = osprobe(&db).args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = osprobe(&db)
        .args(["compare", "latest", "latest", "--threshold", "abc"])
        .output()
        .unwrap();
    assert!(stderr(&out).contains("5%") && stderr(&out).contains("0.05"));
}

#[test]
fn reproduce_lists_every_reference_row_beside_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    smoke_cpu_run(&db);
    let refs = osprobe_report::reproduce::references().unwrap();
    let out = osprobe(&db).args(["reproduce", "--json"]).output().unwrap();
    let rows = common::json_of(&out);
    common::assert_follows("reproduce.schema.json", &rows);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), refs.len());
    let syscall = rows
        .iter()
        .find(|r| r["experiment"] == "cpu.syscall")
        .unwrap();
    assert_eq!(syscall["status"], "measured");
    assert_eq!(syscall["reference"], 1696.34);
    let ratio = syscall["ratio"].as_f64().unwrap();
    let this = syscall["this"].as_f64().unwrap();
    assert!((ratio - this / 1696.34).abs() < 1e-9 * ratio.max(1.0));
    let rtt = rows.iter().find(|r| r["experiment"] == "net.rtt").unwrap();
    assert_eq!(rtt["status"], "not_measured");
    assert!(rtt["detail"]
        .as_str()
        .unwrap()
        .contains("not measured in this run (run `osprobe bench net.rtt"));

    let out = osprobe(&db)
        .args(["reproduce", "latest", "--seed", "004"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("=== CSE 221 Project ===") && !text.contains("=== Data rates"));
    assert!(text.contains("Table 2. Procedure Call Overhead"), "{text}");
    let out = osprobe(&db).args(["reproduce", "--csv"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        refs.len() + 1
    );
}

/// Two runs with no experiment in common, or with one run empty, compare
/// nothing: the gate must fail (exit 1) and say why, not pass on "0 compared".
#[test]
fn runs_with_nothing_in_common_exit_1_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    let out = osprobe(&db)
        .args(["bench", "cpu.loop_overhead", "--profile", "smoke", "--json"])
        .output()
        .unwrap();
    common::json_of(&out);
    // A copy of that run whose experiments are renamed: same machine,
    // nothing in common.
    let mut store = Store::open(&db, Access::Write).unwrap();
    let mut run = store.load_run("latest").unwrap();
    let base = run.id.clone();
    let last = if run.id.ends_with('Z') { "Y" } else { "Z" };
    run.id = format!("{}{last}", &run.id[..run.id.len() - 1]);
    run.started = "2999-01-01T00:00:00.000Z".into();
    for m in &mut run.measurements {
        m.experiment = "renamed.elsewhere".into();
    }
    store.save_run(&run).unwrap();
    drop(store);

    let out = osprobe(&db)
        .args(["compare", &base, &run.id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no experiment in common")
            && err.contains("cpu.loop_overhead")
            && err.contains("renamed.elsewhere"),
        "{err}"
    );
}
