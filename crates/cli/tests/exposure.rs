//! Who may talk to a server: loopback by default, a token required off
//! loopback unless --no-auth says otherwise, and the token read from a file
//! rather than the command line.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

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

#[test]
fn servers_off_loopback_without_a_token_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    for args in [
        vec!["serve", "--bind", "0.0.0.0:0"],
        vec!["rfs", "serve", dir, "--bind", "0.0.0.0:0"],
    ] {
        let out = osprobe(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(text.contains("--token-file"), "{args:?}: {text}");
        assert!(text.contains("--no-auth"), "{args:?}: {text}");
        assert!(!text.contains("osprobe: osprobe"), "doubled prefix: {text}");
    }
}

/// The first line a server prints on stdout, and what it said on stderr
/// before that; the server is stopped with SIGINT.
fn start_and_stop(args: &[&str]) -> (String, String) {
    let mut child = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_TOKEN")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    // SAFETY: kill(2) of our own child, not yet reaped. A server stops
    // cleanly on SIGINT, with exit code 0.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    (first, stderr(&out))
}

#[test]
fn no_auth_serves_anyone_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    for args in [
        vec!["serve", "--bind", "0.0.0.0:0", "--no-auth"],
        vec!["rfs", "serve", dir, "--bind", "0.0.0.0:0", "--no-auth"],
    ] {
        let (first, err) = start_and_stop(&args);
        assert!(first.contains("0.0.0.0:"), "{args:?}: {first}");
        assert!(
            err.contains("WARNING") && err.contains("without a token"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn servers_listen_on_loopback_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    // Port 0 through --bind would change the address too, so the defaults
    // are read from --help instead of binding the well-known ports.
    for args in [vec!["serve", "--help"], vec!["rfs", "serve", dir, "--help"]] {
        let out = osprobe(&args);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("[default: 127.0.0.1:530"), "{args:?}: {help}");
    }
}

#[test]
fn a_token_file_is_read_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("token");
    std::fs::write(&good, "s3cret\n").unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let missing = dir.path().join("missing");
    for (path, why) in [(&empty, "empty"), (&missing, "cannot open")] {
        let out = osprobe(&["serve", "--token-file", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.contains(path.to_str().unwrap()) && text.contains(why),
            "{text}"
        );
    }
    // With a token from a file, a server may listen off loopback.
    let (first, err) = start_and_stop(&[
        "serve",
        "--bind",
        "0.0.0.0:0",
        "--token-file",
        good.to_str().unwrap(),
    ]);
    assert!(first.contains("token required"), "{first}");
    assert!(!err.contains("WARNING"), "{err}");
}

#[test]
fn the_token_from_a_file_is_the_one_required() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "right-secret\n").unwrap();
    let served = common::Served::start(dir.path(), &["--token-file", token.to_str().unwrap()]);
    let ls = |extra: &[&str]| {
        let mut args = vec!["rfs", "ls", "--server", served.addr.as_str(), "--tcp"];
        args.extend_from_slice(extra);
        osprobe(&args)
    };
    let wrong = ls(&["--token", "wrong-secret"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    let right = ls(&["--token-file", token.to_str().unwrap()]);
    assert!(right.status.success(), "{}", stderr(&right));
    assert!(String::from_utf8_lossy(&right.stdout).contains("token"));
}

#[test]
fn token_files_others_can_read_or_relink_are_warned_about_and_fifos_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("private");
    std::fs::write(&private, "s3cret\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open");
    std::fs::write(&open, "s3cret\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    for (path, warning) in [
        (&private, None),
        (&open, Some("readable by other users (mode 0644)")),
        (&link, Some("is a symbolic link")),
    ] {
        let (first, err) = start_and_stop(&["serve", "--token-file", path.to_str().unwrap()]);
        assert!(first.contains("token required"), "{first}");
        match warning {
            None => assert!(!err.contains("warning"), "{err}"),
            Some(w) => assert!(err.contains("warning") && err.contains(w), "{err}"),
        }
    }
    // A FIFO: a clear error at once, not a wait for a writer.
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut child = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_TOKEN")
        .args(["serve", "--token-file", fifo.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("FIFO"), "{}", stderr(&out));
}

#[test]
fn rfs_serve_is_read_only_unless_told_writable() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let (first, _) = start_and_stop(&["rfs", "serve", dir]);
    assert!(first.contains("read-only"), "{first}");
    let (first, _) = start_and_stop(&["rfs", "serve", dir, "--writable"]);
    assert!(!first.contains("read-only"), "{first}");
}
