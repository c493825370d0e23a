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
    // Before osprobe catches SIGINT (it first looks for leftovers with ip
    // and nft), the signal's default action would kill it: that is not
    // the interruption under test.
    wait_until_catching_sigint(child.id(), std::time::Duration::from_secs(20));
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

/// Wait (at most `within`) until `pid` has a handler for SIGINT: the
/// SigCgt mask of /proc/PID/status has bit SIGINT - 1 set.
fn wait_until_catching_sigint(pid: u32, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline && !catches_sigint(pid) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
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

/// Panic with the first violation if `value` does not follow
/// `schema/NAME` (the schema of one command's `--json` output).
pub fn assert_follows(name: &str, value: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schema")
        .join(name);
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Err(e) = jsonschema::validate(&schema, value) {
        panic!(
            "output does not follow {name}: {e} at {}\n{value:#}",
            e.instance_path
        );
    }
}

pub fn is_root() -> bool {
    osprobe_core::sys::is_root()
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

/// The osprobe namespace pairs that exist now, by label: named namespaces
/// (`ip netns list`, older versions) and the host ends of osprobe's veths
/// (`osprobe-<pid in hex><c>` in `ip link`), which exist exactly as long as
/// their namespace (they die together).
pub fn osprobe_namespaces() -> Vec<String> {
    let listed = |args: &[&str]| {
        let out = std::process::Command::new(ip_program())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut names: Vec<String> = listed(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("osprobe-"))
        .map(str::to_string)
        .collect();
    for line in listed(&["-o", "link", "show"]).lines() {
        let Some(word) = line.split_whitespace().nth(1) else {
            continue;
        };
        let name = word.trim_end_matches(':').split('@').next().unwrap_or("");
        if is_pair_label(name) && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// `osprobe-<hex pid><counter char>`.
fn is_pair_label(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("osprobe-") else {
        return false;
    };
    rest.len() >= 2
        && rest.len() <= 7
        && rest[..rest.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
        && rest.as_bytes()[rest.len() - 1].is_ascii_alphanumeric()
}

/// iproute2's `ip`, also where PATH lacks the sbin directories.
pub fn ip_program() -> std::path::PathBuf {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| "ip".into())
}

/// How long the kernel may take to tear down what a dead osprobe held.
/// Usually well under a second; but the kernel destroys dead namespaces one
/// batch at a time on one work queue, and with other namespaces being torn
/// down on a busy 2-CPU machine a batch was seen to take 27 s, and once in
/// CI (after the fleet tests' namespaces) over 60 s. A wait ends as soon
/// as everything is gone.
pub const TEARDOWN: std::time::Duration = std::time::Duration::from_secs(180);

/// One test of a file at a time: every osprobe command sweeps dead owners'
/// leftovers at start, so a second osprobe started by a test running beside
/// would remove what a killed one left and hide it.
pub fn serialized() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// What an osprobe process made in the network, captured while it runs, to
/// check afterwards that nothing of it is left.
#[derive(Debug)]
pub struct NetTraces {
    pub pid: u32,
    /// Its pairs' labels (host veth ends): `osprobe-<pid in hex><c>`.
    pub labels: Vec<String>,
    /// Inodes of the network namespaces it held (descriptors or threads),
    /// other than the one this test runs in.
    pub namespaces: Vec<u64>,
    /// Its child processes.
    pub children: Vec<u32>,
}

impl NetTraces {
    pub fn capture(pid: u32) -> NetTraces {
        let prefix = format!("osprobe-{pid:x}");
        let labels = osprobe_namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix) && n.len() == prefix.len() + 1)
            .collect();
        let own = net_inode(Path::new("/proc/self/ns/net"));
        let mut namespaces = Vec::new();
        let mut links: Vec<std::path::PathBuf> = Vec::new();
        for dir in [format!("/proc/{pid}/fd"), format!("/proc/{pid}/task")] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if dir.ends_with("task") {
                    links.push(e.path().join("ns/net"));
                } else {
                    links.push(e.path());
                }
            }
        }
        for link in links {
            if let Some(ino) = net_inode(&link) {
                if Some(ino) != own && !namespaces.contains(&ino) {
                    namespaces.push(ino);
                }
            }
        }
        NetTraces {
            pid,
            labels,
            namespaces,
            children: children_of(pid),
        }
    }

    /// Everything still there: a pair's host end or named namespace, a
    /// route or address on it, a process in one of its namespaces, a child.
    pub fn remaining(&self) -> Vec<String> {
        let mut found = Vec::new();
        let now = osprobe_namespaces();
        for label in &self.labels {
            if now.contains(label) {
                found.push(format!("namespace pair {label}"));
            }
        }
        let ip = |args: &[&str]| {
            let out = std::process::Command::new(ip_program())
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let routes = ip(&["-4", "route", "show", "table", "all"]);
        let addrs = ip(&["-o", "-4", "addr", "show"]);
        for line in routes.lines().chain(addrs.lines()) {
            if self.labels.iter().any(|l| line.contains(l.as_str())) {
                found.push(format!("route or address: {line}"));
            }
        }
        for proc_dir in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = proc_dir.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if is_zombie_or_gone(pid) {
                continue;
            }
            let tasks = std::fs::read_dir(proc_dir.path().join("task"));
            for task in tasks.into_iter().flatten().flatten() {
                if let Some(ino) = net_inode(&task.path().join("ns/net")) {
                    if self.namespaces.contains(&ino) {
                        found.push(format!("process {pid} in namespace net:[{ino}]"));
                        break;
                    }
                }
            }
        }
        for &child in &self.children {
            if !is_zombie_or_gone(child) {
                found.push(format!("child process {child}"));
            }
        }
        found.sort();
        found.dedup();
        found
    }

    /// Poll (bounded) until nothing remains; what remains at the deadline.
    pub fn wait_until_gone(&self, within: std::time::Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = self.remaining();
            if left.is_empty() || std::time::Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The inode of a `net:[N]` namespace link, None for anything else.
pub fn net_inode(link: &Path) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// The children of every thread of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for task in tasks.into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    children
}

/// Whether `pid` has exited (reaped, or a zombie nobody reaped yet).
pub fn is_zombie_or_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// A server child started from `cmd` (without $OSPROBE_TOKEN) and the
/// 127.0.0.1 address it names on its first line.
pub fn spawn_server(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .env_remove("OSPROBE_TOKEN")
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
    (child, addr)
}

/// An `osprobe rfs serve` child on 127.0.0.1 and a free port, writable
/// unless `extra` holds `--read-only`;
/// stopped with SIGINT on drop.
pub struct Served {
    child: Option<Child>,
    pub addr: String,
}

impl Served {
    pub fn start(dir: &Path, extra: &[&str]) -> Served {
        let mut cmd = Command::cargo_bin("osprobe").unwrap();
        cmd.args(["rfs", "serve"])
            .arg(dir)
            .args(["--bind", "127.0.0.1:0"]);
        // Writable unless the test asks for the read-only export.
        if !extra.contains(&"--read-only") {
            cmd.arg("--writable");
        }
        cmd.args(extra);
        let (child, addr) = spawn_server(cmd);
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
