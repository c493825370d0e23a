//! `osprobe pager run --processes N` and `-- heap`, driven through the
//! binary: real forked processes on one pager. They need userfaultfd
//! (root here, and in CI).

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, need_root};
use serde_json::Value;
use std::process::{Command, Output};

fn osprobe(args: &[&str]) -> Output {
    Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_TOKEN")
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn outcome(args: &[&str]) -> Value {
    let out = osprobe(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    let doc = json_of(&out);
    common::assert_follows("pager-processes.schema.json", &doc);
    assert_eq!(doc["frames_in_use_at_end"], 0, "{doc}");
    assert_eq!(doc["slots_in_use_at_end"], 0, "{doc}");
    doc
}

#[test]
fn processes_share_one_pager_globally_or_by_quota_and_keep_their_data() {
    if !need_root("processes_share_one_pager_globally_or_by_quota_and_keep_their_data") {
        return;
    }
    for replacement in ["global", "local"] {
        let doc = outcome(&[
            "pager",
            "run",
            "--processes",
            "3",
            "--frames",
            "24",
            "--pages",
            "48",
            "--replacement",
            replacement,
            "--json",
            "--",
            "zipf",
        ]);
        let processes = doc["processes"].as_array().unwrap();
        assert_eq!(processes.len(), 3);
        for p in processes {
            assert_eq!(p["verified"], true, "{p}");
            assert_eq!(p["ending"], "exited 0", "{p}");
            let c = &p["counters"];
            let n = |k: &str| c[k].as_u64().unwrap();
            assert_eq!(
                n("faults"),
                n("zero_fills") + n("swap_ins") + n("referenced_bit_faults")
            );
            assert!(n("swap_ins") > 0, "{p}");
        }
        let fairness = doc["fairness"].as_f64().unwrap();
        assert!(fairness > 0.0 && fairness <= 1.0, "{doc}");
        if replacement == "local" {
            assert_eq!(doc["quotas"], serde_json::json!([8, 8, 8]));
            assert_eq!(doc["evictions_across"], 0);
        }
    }
    // The human form names the fairness figure.
    let out = osprobe(&[
        "pager",
        "run",
        "--processes",
        "2",
        "--frames",
        "8",
        "--pages",
        "32",
        "--",
        "sort",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Jain's index"), "{text}");
    assert!(text.contains("words sorted"), "{text}");
}

#[test]
fn the_heap_workload_grows_by_sbrk_through_the_pager() {
    if !need_root("the_heap_workload_grows_by_sbrk_through_the_pager") {
        return;
    }
    let doc = outcome(&[
        "pager", "run", "--frames", "16", "--pages", "600", "--sbrk", "25", "--json", "--", "heap",
    ]);
    let p = &doc["processes"][0];
    assert_eq!(p["verified"], true, "{p}");
    assert_eq!(p["heap_pages"], 600);
    assert_eq!(p["page_table_leaves"], 2, "{p}");
    assert!(p["checked"].as_str().unwrap().contains("sbrk(25)"), "{p}");
}

#[test]
fn bad_process_flags_are_usage_errors_naming_what_is_accepted() {
    for (args, expect) in [
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--replacement",
                "local",
                "--",
                "zipf",
            ],
            "needs --processes",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "2",
                "--processes",
                "3",
                "--replacement",
                "local",
                "--",
                "zipf",
            ],
            "cannot be shared by 3 processes",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--processes",
                "2",
                "--replacement",
                "nearest",
                "--",
                "zipf",
            ],
            "global",
        ),
        (
            vec![
                "pager",
                "run",
                "--frames",
                "8",
                "--processes",
                "0",
                "--",
                "zipf",
            ],
            "processes",
        ),
    ] {
        let out = osprobe(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expect), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn pager_policy_runs_live_with_several_processes() {
    if !need_root("pager_policy_runs_live_with_several_processes") {
        return;
    }
    let out = osprobe(&[
        "bench",
        "pager.policy",
        "--param",
        "mode=live",
        "--param",
        "trace=zipf",
        "--param",
        "policy=clock",
        "--param",
        "frames=24",
        "--param",
        "pages=64",
        "--param",
        "length=2000",
        "--param",
        "processes=3",
        "--param",
        "replacement=local",
        "--no-store",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json_of(&out);
    let found = measurements(&run, "pager.policy");
    let faults = found
        .iter()
        .find(|m| m["metric"] == "faults")
        .unwrap_or_else(|| panic!("no faults in {run}"));
    let notes = faults["notes"].to_string();
    assert!(notes.contains("equal its offline simulation"), "{notes}");
    let fairness = found
        .iter()
        .find(|m| m["metric"] == "fairness")
        .unwrap_or_else(|| panic!("no fairness in {run}"));
    assert_eq!(fairness["unit"], "ratio");
}
