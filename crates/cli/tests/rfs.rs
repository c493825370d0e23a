//! `osprobe rfs ...` and the rfs experiments, driven through the binary.
//! Traffic goes to 127.0.0.1, or to osprobe-* namespaces the binary builds.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{json_of, measurements, need_root, osprobe_namespaces, Served};
use serde_json::Value;

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN");
    cmd
}

fn rfs(args: &[&str], server: &str) -> Output {
    osprobe()
        .arg("rfs")
        .args(args)
        .args(["--server", server])
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn put_ls_stat_get_round_trip_over_udp_and_tcp() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let server = Served::start(export.path(), &[]);
    let content = data(3_000_001, 1);
    let src = local.path().join("src.bin");
    std::fs::write(&src, &content).unwrap();
    for (flag, window, packet) in [("--udp", "16", "1284"), ("--tcp", "32", "64K")] {
        let name = format!("copy{flag}.bin");
        let out = rfs(
            &[
                "put",
                src.to_str().unwrap(),
                &name,
                flag,
                "--window",
                window,
                "--packet",
                packet,
                "--json",
            ],
            &server.addr,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let put = json_of(&out);
        common::assert_follows("rfs-transfer.schema.json", &put);
        assert_eq!(put["bytes"], content.len() as u64);
        assert_eq!(put["verified"], true);
        assert!(put["bytes_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(std::fs::read(export.path().join(&name)).unwrap(), content);

        let back = local.path().join(format!("back{flag}.bin"));
        let out = rfs(
            &[
                "get",
                &name,
                back.to_str().unwrap(),
                flag,
                "--window",
                window,
            ],
            &server.addr,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("verified: xxh3-128") && text.contains("Mbit/s"),
            "{text}"
        );
        assert_eq!(std::fs::read(&back).unwrap(), content, "{flag}");
        assert_eq!(put["xxh3_128"].as_str().unwrap().len(), 32);
        assert!(text.contains(put["xxh3_128"].as_str().unwrap()), "{text}");
    }

    let out = rfs(&["ls", "--json"], &server.addr);
    assert!(out.status.success(), "{}", stderr(&out));
    let list = json_of(&out);
    common::assert_follows("rfs-ls.schema.json", &list);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"copy--udp.bin") && names.contains(&"copy--tcp.bin"),
        "{names:?}"
    );

    let out = rfs(&["stat", "copy--tcp.bin", "--json", "--tcp"], &server.addr);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = json_of(&out);
    common::assert_follows("rfs-stat.schema.json", &st);
    assert_eq!(st["size"], content.len() as u64);
    assert_eq!(st["kind"], "file");

    // Ctrl-C stops the server cleanly, with its counters.
    let out = server.stop();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        log.contains("session") && log.contains("stopped after"),
        "{log}"
    );
}

#[test]
fn bad_input_gets_one_clear_line_and_the_right_exit_code() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("f"), b"hello").unwrap();
    let server = Served::start(export.path(), &["--read-only"]);
    let local = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str, i32, &str)] = &[
        // Usage errors: exit 2, the flag and the accepted form named.
        (
            &["get", "f", "--packet", "64K"],
            &server.addr,
            2,
            "--packet '64K'",
        ),
        (
            &["get", "f", "--packet", "huge"],
            &server.addr,
            2,
            "expected a size",
        ),
        (&["get", "f", "--window", "0"], &server.addr, 2, "--window"),
        (&["ls"], "127.0.0.1:http", 2, "HOST[:PORT]"),
        // Failures: exit 1, the input named.
        (&["get", "missing.bin"], &server.addr, 1, "missing.bin"),
        (&["stat", "../etc/passwd"], &server.addr, 1, "not accepted"),
        (&["get", "/etc/passwd"], &server.addr, 1, ""),
        (&["ls", "--tcp"], "127.0.0.1:1", 1, "cannot connect"),
        (&["ls"], "127.0.0.1:1", 1, "no reply"),
    ];
    for (args, server_addr, code, needle) in cases {
        let mut args = args.to_vec();
        let dir = local.path().to_str().unwrap();
        if args[0] == "get" {
            args.insert(2, dir);
        }
        let out = rfs(&args, server_addr);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Nothing escaped the export, and a read-only export refused the put.
    let src = local.path().join("up.bin");
    std::fs::write(&src, b"x").unwrap();
    let out = rfs(&["put", src.to_str().unwrap()], &server.addr);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("ROFS"), "{}", stderr(&out));
    assert!(!export.path().join("up.bin").exists());
    assert!(!local.path().join("passwd").exists());

    // Serving something that is not a directory is a usage error.
    let out = osprobe()
        .args(["rfs", "serve", "/nonexistent-osprobe-dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a directory"));
}

fn smoke(id: &str, extra: &[&str]) -> Value {
    let out = osprobe()
        .args(["bench", id, "--profile", "smoke", "--no-store", "--json"])
        .args(extra)
        .output()
        .unwrap();
    json_of(&out)
}

#[test]
fn rfs_throughput_smoke_has_rates_and_predictions() {
    let run = smoke("rfs.throughput", &[]);
    common::assert_follows_schema(&run);
    let ms = measurements(&run, "rfs.throughput");
    assert_eq!(ms.len(), 4, "two points, read and write each");
    for m in &ms {
        assert_eq!(m["unit"], "bits/s", "{m}");
        assert!(m["summary"]["p50"].as_f64().unwrap() > 0.0);
        let p = &m["prediction"];
        assert!(p["value"].as_f64().unwrap() > 0.0, "{m}");
        assert!(p["formula"].as_str().unwrap().contains("RTT"), "{m}");
    }
    let metrics: Vec<&str> = ms.iter().map(|m| m["metric"].as_str().unwrap()).collect();
    assert!(metrics.contains(&"read") && metrics.contains(&"write"));
}

#[test]
fn fs_remote_read_smoke_has_block_times_and_a_round_trip_prediction() {
    let run = smoke("fs.remote_read", &[]);
    common::assert_follows_schema(&run);
    let ms = measurements(&run, "fs.remote_read");
    let metrics: Vec<&str> = ms.iter().map(|m| m["metric"].as_str().unwrap()).collect();
    assert_eq!(metrics, ["sequential", "random"]);
    for m in &ms {
        assert_eq!(m["unit"], "ns");
        assert!(m["prediction"]["value"].as_f64().unwrap() > 0.0, "{m}");
        let notes = m["notes"].to_string();
        assert!(notes.contains("round trip measured just before"), "{notes}");
    }
}

/// Over the emulated link (root): a wider window is faster when the round
/// trip dominates, and everything built is removed afterwards.
#[test]
fn emulated_path_orders_windows_and_cleans_up() {
    if !need_root("emulated_path_orders_windows_and_cleans_up") {
        return;
    }
    let before = osprobe_namespaces();
    let rate = |window: &str| {
        let run = smoke(
            "rfs.throughput",
            &[
                "--param",
                "path=emulated",
                "--param",
                "delay=2ms",
                "--param",
                &format!("window={window}"),
                "--param",
                "size=256K",
            ],
        );
        let ms = measurements(&run, "rfs.throughput");
        assert_eq!(ms.len(), 2, "{run}");
        common::p50(ms[0])
    };
    let narrow = rate("1");
    let wide = rate("8");
    assert!(
        wide > 2.0 * narrow,
        "window 8: {wide} bits/s, window 1: {narrow}"
    );
    let after = osprobe_namespaces();
    let leftover: Vec<_> = after.iter().filter(|n| !before.contains(n)).collect();
    assert!(leftover.is_empty(), "left behind: {leftover:?}");
}

/// Wait (at most 30 s) until `path` exists; false if it never did.
fn wait_for(what: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Ctrl-C in the middle of a get or a put: exit 130 with one line, no
/// partial file left on either side, and the old remote file intact. A 1 GiB sparse file moved 512 bytes
/// at a time with one request in flight cannot finish before the signal,
/// which is sent only once the transfer has started writing.
#[test]
fn interrupted_get_and_put_leave_no_partial_file() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let big = 1u64 << 30;
    std::fs::File::create(export.path().join("big.bin"))
        .unwrap()
        .set_len(big)
        .unwrap();
    let server = Served::start(export.path(), &[]);
    for flag in ["--udp", "--tcp"] {
        // get: the partial file appears beside the target, then goes.
        let target = local.path().join(format!("got{flag}.bin"));
        let child = osprobe()
            .args(["rfs", "get", "big.bin"])
            .arg(&target)
            .args([flag, "--window", "1", "--packet", "512"])
            .args(["--server", &server.addr])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = wait_for(|| {
            names_in(local.path())
                .iter()
                .any(|n| n.contains(".osprobe-get-") && n.contains(flag))
        });
        assert!(started, "{flag}: no partial file appeared");
        let out = common::interrupt(child, &format!("rfs get {flag}"));
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{flag}: {err}");
        assert!(
            err.contains("interrupted") && err.contains("removed"),
            "{err}"
        );
        assert!(
            names_in(local.path()).is_empty(),
            "{flag}: left {:?}",
            names_in(local.path())
        );

        // put: the upload (a temporary file beside the target) is
        // discarded, and the old file is untouched.
        let src = local.path().join("up.bin");
        std::fs::File::create(&src).unwrap().set_len(big).unwrap();
        let name = format!("up{flag}.bin");
        std::fs::write(export.path().join(&name), b"old version").unwrap();
        let child = osprobe()
            .args(["rfs", "put"])
            .arg(&src)
            .arg(&name)
            .args([flag, "--window", "1", "--packet", "512"])
            .args(["--server", &server.addr])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let remote = export.path().join(&name);
        let started = wait_for(|| {
            std::fs::read_dir(export.path()).unwrap().any(|e| {
                let e = e.unwrap();
                let n = e.file_name().to_string_lossy().into_owned();
                n.contains(".osprobe-put-")
                    && n.contains(flag)
                    && e.metadata().is_ok_and(|m| m.len() > 0)
            })
        });
        assert!(started, "{flag}: the put never started writing");
        let out = common::interrupt(child, &format!("rfs put {flag}"));
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{flag}: {err}");
        assert!(
            err.contains("unchanged") && err.contains("discarded"),
            "{err}"
        );
        assert_eq!(std::fs::read(&remote).unwrap(), b"old version");
        std::fs::remove_file(&remote).unwrap();
        std::fs::remove_file(&src).unwrap();
    }
    assert_eq!(names_in(export.path()), ["big.bin"]);
}

#[test]
fn ls_escapes_names_and_serve_checks_max_file_size() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("evil\x1b[2J\nosprobe: ok"), b"x").unwrap();
    let server = Served::start(export.path(), &["--max-file-size", "1M"]);
    let out = rfs(&["ls"], &server.addr);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(text.contains("evil\\x1b[2J\\nosprobe: ok"), "{text:?}");
    assert_eq!(text.lines().count(), 1, "{text:?}");
    drop(server);
    let out = osprobe()
        .args(["rfs", "serve"])
        .arg(export.path())
        .args(["--max-file-size", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--max-file-size 'lots'"),
        "{}",
        stderr(&out)
    );
}

/// Names of put uploads in `dir` (the server's temporary files).
fn uploads_in(dir: &Path) -> Vec<String> {
    names_in(dir)
        .into_iter()
        .filter(|n| n.contains(".osprobe-put-"))
        .collect()
}

/// kill -9 of `rfs put` midway (over TCP): the old file is intact and the
/// server removes the upload when the connection drops.
#[test]
fn a_put_killed_midway_leaves_the_old_file_and_no_upload() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("doc"), b"old version").unwrap();
    let src = local.path().join("doc");
    std::fs::File::create(&src)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let server = Served::start(export.path(), &[]);
    let mut child = osprobe()
        .args(["rfs", "put"])
        .arg(&src)
        .args(["doc", "--tcp", "--window", "1", "--packet", "512"])
        .args(["--server", &server.addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = wait_for(|| {
        uploads_in(export.path())
            .iter()
            .any(|n| std::fs::metadata(export.path().join(n)).is_ok_and(|m| m.len() > 0))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "the put never started writing");
    assert!(
        wait_for(|| uploads_in(export.path()).is_empty()),
        "left {:?}",
        uploads_in(export.path())
    );
    assert_eq!(
        std::fs::read(export.path().join("doc")).unwrap(),
        b"old version"
    );
}
