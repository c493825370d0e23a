//! SIGTERM and SIGHUP stop osprobe like Ctrl-C (clean up, exit 128 +
//! signal), and what a SIGKILL leaves on disk is swept by the next command
//! of any kind. Uses `proc.spawn`, which writes a small static executable
//! into a scratch directory of the temp directory: no root needed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn osprobe(tmp: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_osprobe"));
    cmd.env("TMPDIR", tmp)
        .arg("--db")
        .arg(tmp.join("unused.db"))
        .arg("--quiet");
    cmd
}

/// Start `bench proc.spawn` and wait (bounded) until its executable's
/// scratch directory exists in `tmp`.
fn start_spawning(tmp: &Path) -> Child {
    let mut child = osprobe(tmp)
        .args(["bench", "proc.spawn", "--profile", "full", "--no-store"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start osprobe");
    let deadline = Instant::now() + Duration::from_secs(20);
    while osprobe_entries(tmp).is_empty() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "proc.spawn made no scratch directory in {}: {}",
                tmp.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn osprobe_entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("osprobe-"))
        .collect()
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
}

#[test]
fn sigterm_and_sighup_stop_like_ctrl_c_with_128_plus_the_signal() {
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        let tmp = tempfile::tempdir().unwrap();
        let child = start_spawning(tmp.path());
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{name}: {stderr}");
        assert!(stderr.contains("interrupted"), "{name}: {stderr}");
        assert_eq!(
            osprobe_entries(tmp.path()),
            Vec::<String>::new(),
            "{name} left files"
        );
    }
}

#[test]
fn what_sigkill_left_on_disk_is_swept_by_the_next_command_of_any_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_spawning(tmp.path());
    child.kill().unwrap();
    child.wait().unwrap();
    let left = osprobe_entries(tmp.path());
    assert!(
        !left.is_empty(),
        "nothing to sweep: the test proves nothing"
    );
    // A live owner's directory beside it must stay.
    let live = tmp.path().join(format!(
        "osprobe-scratch-{}-{}-LIVE",
        std::process::id(),
        start_time_of_self()
    ));
    std::fs::create_dir(&live).unwrap();
    let out = osprobe(tmp.path()).arg("list").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        osprobe_entries(tmp.path()),
        vec![live.file_name().unwrap().to_string_lossy().into_owned()],
        "`osprobe list` did not sweep {left:?}"
    );
}

/// Field 22 of /proc/self/stat (counted after the command name).
fn start_time_of_self() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}
