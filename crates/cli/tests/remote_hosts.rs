//! Every experiment with a remote form run against far ends that are
//! `osprobe serve --export` processes on two hosts built from network
//! namespaces (198.18.100.2 and 198.18.101.2, each reached through this
//! namespace's routing): `run --to HOST` measures every experiment with a
//! remote form (net.*, rfs.throughput, fs.remote_read, pager.fault) on the
//! first, `bench --param to=HOST` passes the token too, and each bad far end
//! on the second (no serve, no --export, a read-only export, a wrong or
//! missing token) is one line, exit 1, nothing stored. Root only.

mod common;
mod ns_host;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, need_root, skips};
use ns_host::{token_file, NsHost};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output};

/// The two hosts, in this test's fixed ranges.
const MEASURED: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const FAULTY: Ipv4Addr = Ipv4Addr::new(198, 18, 101, 2);

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN");
    cmd
}

/// The experiments with a remote form: those taking `to`.
fn remote_forms() -> Vec<String> {
    let out = osprobe().args(["list", "--json"]).output().unwrap();
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["params"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "to"))
        })
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

fn run_to(db: &Path, to: &str, only: &str, extra: &[&str]) -> Output {
    osprobe()
        .arg("--db")
        .arg(db)
        .args(["run", "--to", to, "--profile", "smoke", "--only", only])
        .args(extra)
        .output()
        .unwrap()
}

fn one_line_failure(out: &Output, wanted: &[&str]) {
    failure_with(1, out, wanted)
}

fn failure_with(code: i32, out: &Output, wanted: &[&str]) {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for w in wanted {
        assert!(err.contains(w), "'{w}' missing from: {err}");
    }
}

fn stored_runs(db: &Path) -> usize {
    let out = osprobe()
        .arg("--db")
        .arg(db)
        .args(["history", "--json"])
        .output()
        .unwrap();
    if !db.exists() {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array().map(|a| a.len()).unwrap_or(0)
}

const FILE_EXPERIMENTS: &str = "rfs.throughput,fs.remote_read,pager.fault";

#[test]
fn run_to_a_host_measures_every_remote_form_there() {
    if !need_root("two namespace hosts") {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let (_dir, token) = token_file("t0ken-measured");
    let token = token.to_str().unwrap();
    let (_host, addr) = NsHost::start(
        MEASURED,
        &[
            "--token-file",
            token,
            "--export",
            export.path().to_str().unwrap(),
            "--export-writable",
        ],
    );
    let out = osprobe()
        .args(["run", "--to", &addr, "--token-file", token])
        .args(["--profile", "smoke", "--no-store", "--json"])
        .output()
        .unwrap();
    let run = json_of(&out);
    let forms = remote_forms();
    for id in [
        "net.rtt",
        "net.bandwidth",
        "rfs.throughput",
        "fs.remote_read",
    ] {
        assert!(forms.iter().any(|f| f == id), "{id} has no remote form");
    }
    for id in &forms {
        let ms = measurements(&run, id);
        // An experiment this machine cannot run (a congestion control the
        // kernel lacks, say) is skipped with its reason; none fails.
        assert!(
            !ms.is_empty() || !skips(&run, id).is_empty(),
            "{id}: neither measured nor skipped"
        );
        for m in ms {
            if id == "pager.fault" && m["metric"] != "swap_in_rfs" {
                continue; // its other faults are local and ignore the path
            }
            assert_eq!(m["params"]["path"], "remote", "{id}: {m}");
            assert_eq!(m["params"]["to"], addr.as_str(), "{id}");
        }
    }
    for id in [
        "net.rtt",
        "net.bandwidth",
        "rfs.throughput",
        "fs.remote_read",
    ] {
        assert!(!measurements(&run, id).is_empty(), "{id}: no measurement");
    }
    // pager.fault: its remote form is the swap over rfs.
    let faults = measurements(&run, "pager.fault");
    assert!(
        faults.iter().any(|m| m["metric"] == "swap_in_rfs"
            && m["notes"].to_string().contains("remote osprobe serve")),
        "{faults:?}"
    );
    // The far end was described.
    assert!(
        run["far_ends"].to_string().contains(&addr),
        "{}",
        run["far_ends"]
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("t0ken"));

    // `bench` takes the token the same way.
    let bench = |extra: &[&str]| {
        osprobe()
            .args(["bench", "rfs.throughput", "--param", "path=remote"])
            .args(["--param", &format!("to={addr}")])
            .args(["--profile", "smoke", "--no-store", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let run = json_of(&bench(&["--token-file", token]));
    assert!(!measurements(&run, "rfs.throughput").is_empty());
    let out = bench(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // The far end holds none of the files the experiments wrote.
    let left: Vec<_> = std::fs::read_dir(export.path()).unwrap().collect();
    assert!(left.is_empty(), "left on the far end: {left:?}");
}

#[test]
fn bad_far_ends_fail_in_one_line_and_store_nothing() {
    if !need_root("two namespace hosts") {
        return;
    }
    let db_dir = tempfile::tempdir().unwrap();
    let db = db_dir.path().join("runs.db");
    let export = tempfile::tempdir().unwrap();
    let exp = export.path().to_str().unwrap();
    let (_dir, token) = token_file("right");
    let token = token.to_str().unwrap();
    let mut host = NsHost::new(FAULTY);
    // No serve there: the port of a serve that was stopped.
    let gone = host.serve(&["--no-auth"]);
    host.stop(0);
    let plain = host.serve(&["--no-auth"]);
    let read_only = host.serve(&["--no-auth", "--export", exp]);
    let guarded = host.serve(&["--token-file", token, "--export", exp, "--export-writable"]);

    let out = run_to(&db, &gone, "net.rtt", &[]);
    one_line_failure(&out, &["--to", &gone, "osprobe serve"]);

    // A serve without --export, asked for the file service.
    let out = run_to(&db, &plain, FILE_EXPERIMENTS, &[]);
    one_line_failure(&out, &["offers no file service", "--export"]);

    // A read-only export: the experiments that write say how to fix it.
    let out = run_to(&db, &read_only, "rfs.throughput", &[]);
    one_line_failure(&out, &["--export-writable", "nothing was stored"]);

    // A wrong token: the file service refuses the proof.
    let out = run_to(&db, &guarded, "fs.remote_read", &["--token", "wrong"]);
    one_line_failure(&out, &["nothing was stored"]);

    // A token the serve wants but was not given.
    let out = run_to(&db, &guarded, "net.rtt", &[]);
    one_line_failure(&out, &["token"]);

    // An experiment without a remote form: a usage error.
    let out = run_to(&db, &plain, "cpu.syscall", &[]);
    failure_with(2, &out, &["remote form"]);

    assert_eq!(stored_runs(&db), 0, "a failed remote run stored something");
    assert!(std::fs::read_dir(export.path()).unwrap().next().is_none());
}
