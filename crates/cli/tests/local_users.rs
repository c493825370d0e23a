//! Other local users against servers without a token: `osprobe rfs serve`
//! and `osprobe serve` run by root refuse a client run as `nobody`
//! (docs/servers.md, "Other local users"), and still serve root's own.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use std::path::Path;
use std::process::{Command, Output};

const NOBODY: &str = "65534";

/// `osprobe ARGS` run as nobody through setpriv (util-linux).
fn as_nobody(args: &[&str]) -> Output {
    let bin = Command::cargo_bin("osprobe").unwrap();
    Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "--",
        ])
        .arg(bin.get_program())
        .args(args)
        .env_remove("OSPROBE_TOKEN")
        .env("HOME", "/nonexistent")
        .env("XDG_DATA_HOME", "/nonexistent")
        .output()
        .expect("setpriv runs")
}

/// `osprobe ARGS` as ourselves (root).
fn as_root(args: &[&str]) -> Output {
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

fn assert_refused_as_other_user(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(out));
    assert!(
        stderr(out).contains("serves only its own user") && stderr(out).contains("--token-file"),
        "{what}: {}",
        stderr(out)
    );
}

#[test]
fn rfs_serve_without_a_token_refuses_other_local_users() {
    if !common::need_root("rfs_serve_without_a_token_refuses_other_local_users") {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let secret = export.path().join("secret");
    std::fs::write(&secret, b"root's only").unwrap();
    let served = common::Served::start(export.path(), &[]);
    for transport in ["--udp", "--tcp"] {
        let ls = as_nobody(&["rfs", "ls", "--server", &served.addr, transport]);
        assert_refused_as_other_user(&ls, &format!("ls {transport}"));
        let mine = as_root(&["rfs", "ls", "--server", &served.addr, transport]);
        assert!(mine.status.success(), "{}", stderr(&mine));
        assert!(String::from_utf8_lossy(&mine.stdout).contains("secret"));
    }
    let get = as_nobody(&[
        "rfs",
        "get",
        "secret",
        "/dev/null",
        "--server",
        &served.addr,
    ]);
    assert_refused_as_other_user(&get, "get");
}

/// An `osprobe serve` on loopback: the child and its address.
fn serve(dir: &Path) -> (std::process::Child, String) {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--dir"])
        .arg(dir);
    common::spawn_server(cmd)
}

#[test]
fn osprobe_serve_without_a_token_refuses_other_local_users() {
    if !common::need_root("osprobe_serve_without_a_token_refuses_other_local_users") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve(dir.path());
    // A file nobody may read, outside any private directory.
    let file = std::env::temp_dir().join(format!("osprobe-local-users-{}", std::process::id()));
    std::fs::write(&file, vec![7u8; 4096]).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let theirs = as_nobody(&["send", file.to_str().unwrap(), "--to", &addr]);
    let mine = as_root(&["send", file.to_str().unwrap(), "--to", &addr]);
    let _ = std::fs::remove_file(&file);
    let _ = child.kill();
    let _ = child.wait();
    assert_refused_as_other_user(&theirs, "send");
    assert!(mine.status.success(), "{}", stderr(&mine));
}
