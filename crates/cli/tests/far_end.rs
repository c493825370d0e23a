//! The far end described: `osprobe serve` in a network namespace of its
//! own (a "remote host" reached over a veth, 198.18.80.0/24), a network
//! test against it with --to, and the stored run holding both ends: the
//! far machine's environment, its veth, and this side's veth towards it,
//! shown side by side by `show`.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{ip_program, json_of, need_root};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

const NEAR: &str = "198.18.80.1";
const FAR: &str = "198.18.80.2";
const TOKEN: &str = "far-end-t0ken";

/// `osprobe serve` as the only process of a fresh network namespace, which
/// (with its veth pair) lives exactly as long as the process does: killed
/// on drop, and by the kernel if this test dies (PR_SET_PDEATHSIG).
struct FarHost {
    child: Child,
    addr: String,
    near_veth: String,
    far_veth: String,
}

impl FarHost {
    fn start() -> FarHost {
        let tag = format!("{:x}", std::process::id() & 0x00ff_ffff);
        let near_veth = format!("ofe{tag}n");
        let far_veth = format!("ofe{tag}f");
        let osprobe = assert_cmd::cargo::cargo_bin("osprobe");
        let ip = ip_program();
        // The shell waits for its veth end, configures it, then becomes
        // the server.
        let script = format!(
            "read go && {ip} link set lo up && {ip} addr add {FAR}/24 dev {far_veth} && {ip} link set {far_veth} up && exec \"$0\" serve --bind {FAR}:0 --token {TOKEN}",
            ip = ip.display()
        );
        let mut command = Command::new("sh");
        command
            .args(["-c", &script])
            .arg(&osprobe)
            .env_remove("OSPROBE_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // SAFETY: async-signal-safe calls only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::unshare(libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("a shell in a new network namespace");
        let pid = child.id().to_string();
        let run_ip = |args: &[&str]| {
            let out = Command::new(&ip).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run_ip(&[
            "link", "add", &near_veth, "type", "veth", "peer", "name", &far_veth, "netns", &pid,
        ]);
        run_ip(&["addr", "add", &format!("{NEAR}/24"), "dev", &near_veth]);
        run_ip(&["link", "set", &near_veth, "up"]);
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split_whitespace()
            .find(|w| w.starts_with(&format!("{FAR}:")))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        FarHost {
            child,
            addr,
            near_veth,
            far_veth,
        }
    }
}

impl Drop for FarHost {
    fn drop(&mut self) {
        // The namespace and both veth ends go with the process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_run_against_a_serve_in_a_namespace_stores_and_shows_both_ends() {
    if !need_root("a_run_against_a_serve_in_a_namespace_stores_and_shows_both_ends") {
        return;
    }
    let far = FarHost::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let osprobe = || {
        let mut c = Command::cargo_bin("osprobe").unwrap();
        c.env_remove("OSPROBE_TOKEN").arg("--db").arg(&db);
        c
    };
    let out = osprobe()
        .args(["net", "rtt", "--to", &far.addr, "--token", TOKEN])
        .args(["--profile", "smoke", "--param", "proto=tcp"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Near and far end"), "{stdout}");

    let shown = osprobe()
        .args(["show", "latest", "--json"])
        .output()
        .unwrap();
    let run = json_of(&shown);
    common::assert_follows_schema(&run);
    let ends = run["far_ends"].as_array().expect("far ends stored");
    assert_eq!(ends.len(), 1, "{ends:?}");
    let end = &ends[0];
    assert_eq!(end["to"], far.addr.as_str());
    assert!(end["error"].is_null(), "{end}");
    assert_eq!(end["far_nic"]["name"], far.far_veth.as_str());
    assert_eq!(end["far_nic"]["address"], FAR);
    assert_eq!(end["far_nic"]["kind"], "veth");
    assert_eq!(end["near_nic"]["name"], far.near_veth.as_str());
    assert_eq!(end["near_nic"]["address"], NEAR);
    assert_eq!(end["near_nic"]["driver"], "veth");
    assert!(
        end["far_nic"]["mtu"].as_u64().is_some_and(|m| m > 0),
        "{end}"
    );
    let far_env = &end["environment"];
    assert!(far_env["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(far_env["logical_cpus"].as_u64().is_some_and(|n| n > 0));
    // The token never reaches the store.
    assert!(!run.to_string().contains(TOKEN));

    let text = osprobe().args(["show", "latest"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let mtu = text
        .lines()
        .find(|l| l.trim_start().starts_with("MTU"))
        .unwrap_or_else(|| panic!("no MTU row in {text}"));
    assert!(mtu.matches("1500").count() == 2, "{mtu}");
    assert!(
        text.contains(&far.far_veth) && text.contains(&far.near_veth),
        "{text}"
    );
}
