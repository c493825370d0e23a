//! The binary, driven as a user drives it, with the smoke profile. Checks
//! structure, units and robust relations between results; never absolute
//! times (these machines are shared and noisy).

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

mod common;
use common::{interrupt, measurements};

fn osprobe(db: &Path) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.arg("--db").arg(db).arg("--quiet");
    cmd
}

const SECTION_A: &[&str] = &[
    "cpu.timer_overhead",
    "cpu.loop_overhead",
    "cpu.call_overhead",
    "cpu.syscall",
    "proc.fork",
    "proc.spawn",
    "proc.thread_create",
    "proc.ctx_switch",
];

/// One smoke run, stored, shared by the tests that read it.
struct SmokeRun {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    json: Value,
}

fn smoke_run() -> &'static SmokeRun {
    static RUN: OnceLock<SmokeRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("results.db");
        let out = osprobe(&db)
            .args(["run", "--profile", "smoke", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: Value = serde_json::from_slice(&out.stdout).expect("run --json prints JSON");
        SmokeRun {
            _dir: dir,
            db,
            json,
        }
    })
}

/// The median of a measurement; `param` picks the grid point, if any.
fn median(run: &Value, experiment: &str, metric: &str, param: Option<(&str, &str)>) -> f64 {
    measurements(run, experiment)
        .into_iter()
        .find(|m| m["metric"] == metric && param.is_none_or(|(k, v)| m["params"][k] == v))
        .unwrap_or_else(|| panic!("{experiment} {metric} {param:?} missing"))["summary"]["p50"]
        .as_f64()
        .unwrap()
}

#[test]
fn every_section_a_experiment_appears_with_its_unit() {
    let run = &smoke_run().json;
    let tsc = run["environment"]["clock"]["source"] == "tsc";
    for id in SECTION_A {
        let ms = measurements(run, id);
        assert!(!ms.is_empty(), "{id} produced no measurement");
        for m in ms {
            assert_eq!(m["unit"], "ns", "{id}");
            assert!(m["summary"]["n"].as_u64().unwrap() >= 1);
            assert_eq!(m["run"], run["id"]);
            assert_eq!(
                m["cycles"].is_object(),
                tsc,
                "{id}: cycles reported exactly when the clock is the TSC"
            );
        }
    }
    assert_eq!(
        measurements(run, "cpu.call_overhead").len(),
        8,
        "0..7 arguments"
    );
    assert!(run["skipped"].as_array().unwrap().is_empty() || cfg!(not(target_arch = "x86_64")));
}

#[test]
fn relations_that_hold_on_any_machine() {
    let run = &smoke_run().json;
    let syscall = median(run, "cpu.syscall", "getppid", Some(("call", "getppid")));
    let fork = median(run, "proc.fork", "fork_exit_wait", None);
    let thread = median(
        run,
        "proc.thread_create",
        "create_join",
        Some(("api", "pthread")),
    );
    let coroutine = median(
        run,
        "proc.ctx_switch",
        "switch",
        Some(("kind", "coroutine")),
    );
    let process_switch = median(
        run,
        "proc.ctx_switch",
        "round_trip",
        Some(("kind", "process")),
    );
    assert!(
        fork > syscall,
        "fork ({fork} ns) must cost more than a system call ({syscall} ns)"
    );
    assert!(
        thread < fork,
        "thread creation ({thread} ns) must cost less than fork ({fork} ns)"
    );
    assert!(
        coroutine < process_switch,
        "a coroutine switch stays in user space"
    );
}

#[test]
fn json_output_follows_the_documented_schema() {
    let schema = common::schema();
    let run = &smoke_run().json;
    common::assert_follows_schema(run);
    // The schema is not vacuous: a measurement without a unit is rejected.
    let mut broken = run.clone();
    broken["measurements"][0]
        .as_object_mut()
        .unwrap()
        .remove("unit");
    assert!(!jsonschema::is_valid(&schema, &broken));
}

#[test]
fn the_run_is_stored_and_shown_again() {
    let smoke = smoke_run();
    let out = osprobe(&smoke.db)
        .args(["history", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let history: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&smoke.json["id"].as_str().unwrap()));

    let out = osprobe(&smoke.db)
        .args(["show", "latest", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["measurements"], smoke.json["measurements"]);
    assert_eq!(shown["environment"], smoke.json["environment"]);

    // Wide enough that no column gives way (tables fit the terminal).
    let out = osprobe(&smoke.db)
        .env("COLUMNS", "250")
        .args(["show", "latest"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for header in [
        "median",
        "95% CI",
        "min",
        "p99",
        "unit",
        "notes",
        "cpu.syscall",
    ] {
        assert!(text.contains(header), "human table lacks {header}:\n{text}");
    }
}

#[test]
fn bench_measures_the_chosen_point_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = osprobe(&dir.path().join("r.db"))
        .args([
            "bench",
            "cpu.call_overhead",
            "--profile",
            "smoke",
            "--param",
            "args=3",
            "--json",
            "--no-store",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ms = run["measurements"].as_array().unwrap();
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0]["params"]["args"], 3);
    assert!(
        !dir.path().join("r.db").exists(),
        "--no-store writes nothing"
    );
}

#[test]
fn list_names_every_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let out = osprobe(&dir.path().join("r.db"))
        .args(["list", "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    for id in SECTION_A {
        assert!(ids.contains(id), "{id} not listed");
    }
}

/// Run osprobe expecting failure; returns stderr.
fn fails(db: &Path, args: &[&str], code: i32) -> String {
    let out = osprobe(db).args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn usage_errors_exit_2_name_the_input_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let err = fails(&db, &["bench", "cpu.nope", "--profile", "smoke"], 2);
    assert!(
        err.contains("'cpu.nope'") && err.contains("cpu.syscall"),
        "{err}"
    );
    let err = fails(&db, &["bench", "cpu.call_overhead", "--param", "args=9"], 2);
    assert!(err.contains("'9'") && err.contains("0 to 7"), "{err}");
    let err = fails(
        &db,
        &["bench", "cpu.call_overhead", "--param", "arity=1"],
        2,
    );
    assert!(
        err.contains("'arity'") && err.contains("args=0..7"),
        "{err}"
    );
    let err = fails(&db, &["bench", "cpu.syscall", "--param", "call"], 2);
    assert!(err.contains("NAME=VALUE"), "{err}");
    let err = fails(&db, &["run", "--only", "nosuch.*"], 2);
    assert!(err.contains("'nosuch.*'"), "{err}");
    let err = fails(&db, &["run", "--profile", "huge"], 2);
    assert!(err.contains("huge"), "{err}");
    assert!(!db.exists(), "no database touched by a rejected command");
    let err = fails(&db, &["show", "01NOSUCHRUN"], 1);
    assert!(err.contains("no results database"), "{err}");
}

#[test]
fn store_problems_fail_fast_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let unwritable = file.join("results.db");
    let err = fails(&unwritable, &["run", "--profile", "smoke"], 1);
    assert!(err.contains(&unwritable.display().to_string()), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let corrupt = dir.path().join("corrupt.db");
    std::fs::write(&corrupt, vec![0x42u8; 4096]).unwrap();
    let err = fails(&corrupt, &["run", "--profile", "smoke"], 1);
    assert!(err.contains("is not an osprobe results database"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(
        std::fs::read(&corrupt).unwrap(),
        vec![0x42u8; 4096],
        "corrupt file left as it was"
    );
    fails(&corrupt, &["history"], 1);
}

#[test]
fn history_of_an_empty_store_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = osprobe(&dir.path().join("absent.db"))
        .arg("history")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no runs"));
}

/// Ctrl-C during a run: exit 130 and nothing stored.
#[test]
fn interrupting_a_run_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("osprobe"))
        .arg("--db")
        .arg(&db)
        .args(["--quiet", "run", "--profile", "full"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = interrupt(child, "run --profile full");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was stored"));
    let history = osprobe(&db).args(["history", "--json"]).output().unwrap();
    let runs: Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 0);
}
