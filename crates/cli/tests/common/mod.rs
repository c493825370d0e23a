//! Helpers shared by the integration tests: reading a run's JSON, root
//! checks and the osprobe namespaces that exist.
// Each test file uses its own subset.
#![allow(dead_code)]

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The measurements of one experiment in a run document.
pub fn measurements<'a>(run: &'a Value, experiment: &str) -> Vec<&'a Value> {
    run["measurements"]
        .as_array()
        .expect("a run has measurements")
        .iter()
        .filter(|m| m["experiment"] == experiment)
        .collect()
}

/// The skipped points of one experiment in a run document.
pub fn skips<'a>(run: &'a Value, experiment: &str) -> Vec<&'a Value> {
    run["skipped"]
        .as_array()
        .expect("a run has a skipped list")
        .iter()
        .filter(|s| s["experiment"] == experiment)
        .collect()
}

/// A measurement's median.
pub fn p50(m: &Value) -> f64 {
    m["summary"]["p50"]
        .as_f64()
        .expect("summary.p50 is a number")
}

/// The JSON a successful `osprobe ... --json` printed.
pub fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "osprobe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

/// Send SIGINT to a running osprobe, wait for it, and require exit code 130
/// (interrupted); returns its output for further checks.
pub fn interrupt(child: std::process::Child, what: &str) -> std::process::Output {
    // SAFETY: plain kill(2) of our own child, which has not been reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child
        .wait_with_output()
        .expect("wait for the interrupted osprobe");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The documented JSON schema of runs.
pub fn schema() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schema/osprobe.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Panic with the first violation if `run` does not follow the schema.
pub fn assert_follows_schema(run: &Value) {
    if let Err(e) = jsonschema::validate(&schema(), run) {
        panic!(
            "run JSON does not follow the schema: {e} at {}",
            e.instance_path
        );
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Namespace tests run as root; CI runs as root and must not skip them
/// (`skip` fails the test there).
pub fn need_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    osprobe_core::testing::skip(format!("{test} needs root"));
    false
}

/// The names of the osprobe-* network namespaces now.
pub fn osprobe_namespaces() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("osprobe-"))
        .map(str::to_string)
        .collect()
}

/// An `osprobe rfs serve` child on 127.0.0.1 and a free port; stopped with
/// SIGINT on drop.
pub struct Served {
    child: Option<Child>,
    pub addr: String,
}

impl Served {
    pub fn start(dir: &Path, extra: &[&str]) -> Served {
        let mut child = Command::cargo_bin("osprobe")
            .unwrap()
            .env_remove("OSPROBE_TOKEN")
            .args(["rfs", "serve"])
            .arg(dir)
            .args(["--bind", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        Served {
            child: Some(child),
            addr,
        }
    }

    /// SIGINT, and the server's exit status and output.
    pub fn stop(mut self) -> Output {
        let child = self.child.take().unwrap();
        // SAFETY: kill(2) of our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        child.wait_with_output().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
