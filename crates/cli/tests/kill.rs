//! Nothing of osprobe's networking outlives it, however it dies: after
//! SIGKILL (and SIGTERM, SIGHUP) of `osprobe link -- sleep 60` or of a
//! `--netns` measurement, no namespace, veth, route or child process is
//! left (polled until gone, up to 3 minutes: the kernel tears namespaces down in a
//! work queue). The kill matrix kills every command that builds namespaces,
//! veths or TUN devices at a random moment (seeded: `OSPROBE_KILL_SEED`,
//! printed) and wants its veths gone within one second, with no osprobe
//! command run in between to sweep them. Root only.

mod common;

use common::{children_of, need_root, serialized, NetTraces, TEARDOWN};
use osprobe_link::netns::NetnsPair;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn osprobe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_osprobe"));
    cmd.env_remove("OSPROBE_TOKEN")
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Kills the child on drop, so a failed assertion leaves no osprobe behind.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) of our own child, not yet reaped.
        unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
    }

    fn wait(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }

    /// Poll until `ready` holds (bounded); panics with stderr otherwise.
    fn wait_for(&mut self, what: &str, ready: impl Fn(u32) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let pid = self.pid();
        while !ready(pid) {
            let exited = self.0.as_mut().unwrap().try_wait().unwrap().is_some();
            if exited || Instant::now() > deadline {
                let out = self.0.take().unwrap();
                let _ = unsafe { libc::kill(out.id() as libc::pid_t, libc::SIGKILL) };
                let out = out.wait_with_output().unwrap();
                panic!(
                    "{what} never happened: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// `osprobe link -- sleep 60`, once `sleep` runs; with what it made.
fn link_running_sleep() -> (Running, NetTraces) {
    link_running(&["sleep", "60"], "sleep")
}

/// `osprobe link -- COMMAND...`, once a child named `comm` runs.
fn link_running(command: &[&str], comm_name: &str) -> (Running, NetTraces) {
    let child = osprobe()
        .args(["link", "--"])
        .args(command)
        .spawn()
        .expect("start osprobe link");
    let mut running = Running(Some(child));
    running.wait_for(&format!("{comm_name} starting in namespace A"), |pid| {
        children_of(pid).iter().any(|&c| comm(c) == comm_name)
    });
    let traces = NetTraces::capture(running.pid());
    assert_eq!(traces.labels.len(), 2, "two namespace pairs: {traces:?}");
    assert!(traces.namespaces.len() >= 2, "{traces:?}");
    assert!(!traces.children.is_empty(), "{traces:?}");
    (running, traces)
}

#[test]
fn kill_9_of_link_leaves_no_namespace_link_route_or_child() {
    if !need_root("kill_9_of_link_leaves_no_namespace_link_route_or_child") {
        return;
    }
    let _one = serialized();
    let (running, traces) = link_running_sleep();
    running.signal(libc::SIGKILL);
    running.wait();
    let left = traces.wait_until_gone(TEARDOWN);
    assert!(left.is_empty(), "left behind after kill -9: {left:?}");
}

#[test]
fn sigterm_and_sighup_of_link_clean_up_and_reach_the_command() {
    if !need_root("sigterm_and_sighup_of_link_clean_up_and_reach_the_command") {
        return;
    }
    let _one = serialized();
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        // A shell that notes which signal reached it. Its `sleep 0.1`
        // children end on their own within 0.1 s.
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("signal");
        let script = format!(
            "trap 'echo TERM > {m}; exit 0' TERM; trap 'echo HUP > {m}; exit 0' HUP; \
             while :; do sleep 0.1; done",
            m = marker.display()
        );
        let (running, traces) = link_running(&["sh", "-c", &script], "sh");
        running.signal(sig);
        let out = running.wait();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{name}: {stderr}");
        let got = std::fs::read_to_string(&marker).unwrap_or_default();
        assert_eq!(
            got.trim(),
            &name[3..],
            "{name} was not passed on to the command"
        );
        let left = traces.wait_until_gone(TEARDOWN);
        assert!(left.is_empty(), "{name} left behind: {left:?}");
    }
}

#[test]
fn kill_9_during_a_netns_measurement_leaves_nothing() {
    if !need_root("kill_9_during_a_netns_measurement_leaves_nothing") {
        return;
    }
    let _one = serialized();
    let child = osprobe()
        .args([
            "net",
            "bandwidth",
            "--netns",
            "--profile",
            "smoke",
            "--no-store",
        ])
        .args(["--param", "duration_ms=20000"])
        .spawn()
        .expect("start osprobe net bandwidth --netns");
    let mut running = Running(Some(child));
    running.wait_for("the netns host being built", |pid| {
        !NetTraces::capture(pid).labels.is_empty()
    });
    // Let it get to measuring, then capture what it holds.
    std::thread::sleep(Duration::from_millis(500));
    let traces = NetTraces::capture(running.pid());
    assert_eq!(traces.labels.len(), 1, "{traces:?}");
    assert!(!traces.namespaces.is_empty(), "{traces:?}");
    running.signal(libc::SIGKILL);
    running.wait();
    let left = traces.wait_until_gone(TEARDOWN);
    assert!(left.is_empty(), "left behind after kill -9: {left:?}");
}

/// Within this long of a kill -9, nothing of the killed process may be
/// visible in this namespace (the promise: no later sweep needed).
const KILLED_GONE_WITHIN: Duration = Duration::from_secs(1);

/// A small seeded generator (xorshift): the kill moments are random but
/// reproducible from the printed seed.
struct Moments(u64);

impl Moments {
    fn from_env() -> Moments {
        let seed = std::env::var("OSPROBE_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                now.map_or(1, |d| d.as_nanos() as u64) | 1
            });
        eprintln!("kill matrix: OSPROBE_KILL_SEED={seed}");
        Moments(seed.max(1))
    }

    /// A delay in [0, max).
    fn next(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        max.mul_f64((self.0 % 10_000) as f64 / 10_000.0)
    }
}

/// The interfaces in this namespace whose name says `pid` made them.
fn devices_of(pid: u32) -> Vec<String> {
    let prefix = format!("osprobe-{pid:x}");
    std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && n.len() == prefix.len() + 1)
        .collect()
}

/// Start `args`, wait for its first veth, let it run a random while more
/// (building the rest, measuring), kill -9 it, and return what is still
/// there one second later.
fn kill_at_random_moment(args: &[&str], moments: &mut Moments) -> Vec<String> {
    let child = osprobe().args(args).spawn().expect("start osprobe");
    let mut running = Running(Some(child));
    running.wait_for("its first veth", |pid| !devices_of(pid).is_empty());
    let pause = moments.next(Duration::from_millis(2500));
    std::thread::sleep(pause);
    let traces = NetTraces::capture(running.pid());
    let pid = running.pid();
    eprintln!(
        "osprobe {}: killed {} ms after its first veth, holding {:?}",
        args.join(" "),
        pause.as_millis(),
        traces.labels
    );
    running.signal(libc::SIGKILL);
    running.wait();
    let killed = Instant::now();
    let mut left = Vec::new();
    while killed.elapsed() < KILLED_GONE_WITHIN {
        // The cheap look first, so a loaded machine still polls often.
        left = devices_of(pid)
            .into_iter()
            .map(|d| format!("device {d}"))
            .collect();
        if left.is_empty() {
            left = traces.remaining();
        }
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    left
}

#[test]
fn kill_9_at_a_random_moment_leaves_no_device_within_a_second() {
    if !need_root("kill_9_at_a_random_moment_leaves_no_device_within_a_second") {
        return;
    }
    let _one = serialized();
    let mut moments = Moments::from_env();
    // A far host for the middlebox: a namespace of this test's own.
    let far = NetnsPair::create().expect("a namespace for the middlebox's far host");
    let far_addr = far.peer_addr().to_string();
    let userspace = |stack: &'static str| {
        vec![
            "bench".to_string(),
            "net.userspace".into(),
            "--profile".into(),
            "smoke".into(),
            "--no-store".into(),
            "--param".into(),
            format!("stack={stack}"),
            "--param".into(),
            "duration=20s".into(),
        ]
    };
    let words = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let bandwidth = ["net", "bandwidth", "--profile", "smoke", "--no-store"];
    let long = ["--param", "duration_ms=20000"];
    let cases: Vec<Vec<String>> = vec![
        userspace("smoltcp"),
        userspace("quinn"),
        userspace("kernel"),
        [&bandwidth[..], &["--netns"], &long[..]]
            .concat()
            .iter()
            .map(|w| w.to_string())
            .collect(),
        [&bandwidth[..], &["--delay", "5ms"], &long[..]]
            .concat()
            .iter()
            .map(|w| w.to_string())
            .collect(),
        words(&["link", "--delay", "5ms", "--", "sleep", "60"]),
        words(&[
            "link", "--to", &far_addr, "--delay", "5ms", "--", "sleep", "60",
        ]),
    ];
    let mut failures = Vec::new();
    for case in &cases {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        let left = kill_at_random_moment(&args, &mut moments);
        if !left.is_empty() {
            failures.push(format!("osprobe {}: {left:?}", args.join(" ")));
        }
    }
    drop(far);
    // The middlebox's nftables table and forwarding setting are not held
    // by a descriptor; the next osprobe command removes them (docs/cleanup.md).
    let swept = osprobe().arg("list").output().expect("osprobe list");
    assert!(
        swept.status.success(),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    assert!(
        failures.is_empty(),
        "left behind a second after kill -9:\n{}",
        failures.join("\n")
    );
}
