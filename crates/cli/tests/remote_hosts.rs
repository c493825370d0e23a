//! Every experiment with a remote form run against far ends that are
//! `osprobe serve --export` processes: `run --to HOST` measures net.*,
//! rfs.throughput, fs.remote_read and pager.fault there, and each bad far
//! end (no serve, no --export, a read-only export, a wrong token) is one
//! line, exit 1, nothing stored. The two far ends listen on 127.0.0.1 and
//! 127.0.0.2 (two loopback addresses: two hosts as far as the client can
//! tell).

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN");
    cmd
}

/// `osprobe serve` on `ip` port 0 with `extra` flags; its address.
struct Far {
    child: Child,
    addr: String,
}

impl Far {
    fn start(ip: &str, extra: &[&str]) -> Far {
        let mut child = osprobe()
            .args(["serve", "--bind", &format!("{ip}:0")])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
        });
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in: {line}"))
            .to_string();
        Far { child, addr }
    }
}

impl Drop for Far {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let export = tempfile::tempdir().unwrap();
    let far = Far::start(
        "127.0.0.1",
        &[
            "--token",
            "t0ken",
            "--export",
            export.path().to_str().unwrap(),
            "--export-writable",
        ],
    );
    let out = osprobe()
        .args(["run", "--to", &far.addr, "--token", "t0ken"])
        .args(["--profile", "smoke", "--no-store", "--json"])
        .args(["--only", &format!("net.rtt,{FILE_EXPERIMENTS}")])
        .output()
        .unwrap();
    let run = json_of(&out);
    for id in ["net.rtt", "rfs.throughput", "fs.remote_read"] {
        let ms = measurements(&run, id);
        assert!(!ms.is_empty(), "{id}: no measurement");
        for m in ms {
            assert_eq!(m["params"]["path"], "remote", "{id}: {m}");
            assert_eq!(m["params"]["to"], far.addr.as_str(), "{id}");
        }
    }
    // pager.fault: its remote form is the swap over rfs; the other faults
    // are local and ignore the path, but all ran.
    let faults = measurements(&run, "pager.fault");
    assert!(
        faults.iter().any(|m| m["metric"] == "swap_in_rfs"
            && m["notes"].to_string().contains("remote osprobe serve")),
        "{faults:?}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("t0ken"));
    // The far end holds none of the files the experiments wrote.
    let left: Vec<_> = std::fs::read_dir(export.path()).unwrap().collect();
    assert!(left.is_empty(), "left on the far end: {left:?}");
}

#[test]
fn bad_far_ends_fail_in_one_line_and_store_nothing() {
    let db_dir = tempfile::tempdir().unwrap();
    let db = db_dir.path().join("runs.db");
    let export = tempfile::tempdir().unwrap();
    let exp = export.path().to_str().unwrap();
    let plain = Far::start("127.0.0.2", &[]);
    let read_only = Far::start("127.0.0.1", &["--export", exp]);
    let guarded = Far::start(
        "127.0.0.1",
        &["--token", "right", "--export", exp, "--export-writable"],
    );

    // No serve there: the port of a serve that was stopped.
    let gone = {
        let f = Far::start("127.0.0.2", &[]);
        f.addr.clone()
    };
    let out = run_to(&db, &gone, "net.rtt", &[]);
    one_line_failure(&out, &["--to", &gone, "osprobe serve"]);

    // A serve without --export, asked for the file service.
    let out = run_to(&db, &plain.addr, FILE_EXPERIMENTS, &[]);
    one_line_failure(&out, &["offers no file service", "--export"]);

    // A read-only export: the experiments that write say how to fix it.
    let out = run_to(&db, &read_only.addr, "rfs.throughput", &[]);
    one_line_failure(&out, &["--export-writable", "nothing was stored"]);

    // A wrong token: the file service refuses the proof.
    let out = run_to(&db, &guarded.addr, "fs.remote_read", &["--token", "wrong"]);
    one_line_failure(&out, &["nothing was stored"]);

    // A token the serve wants but was not given.
    let out = run_to(&db, &guarded.addr, "net.rtt", &[]);
    one_line_failure(&out, &["token"]);

    // An experiment without a remote form: a usage error.
    let out = run_to(&db, &plain.addr, "cpu.syscall", &[]);
    failure_with(2, &out, &["remote form"]);

    assert_eq!(stored_runs(&db), 0, "a failed remote run stored something");
    assert!(std::fs::read_dir(export.path()).unwrap().next().is_none());
}
