//! `osprobe fleet run` against real OpenSSH servers in network namespaces
//! (fleet_hosts): the binary copied and run on each host, runs stored with
//! their labels, a pair measured over the namespaces' link, failures
//! reported per host with ssh's own words; and bad inventories refused.

mod common;
mod fleet_hosts;

use assert_cmd::cargo::CommandCargoExt;
use fleet_hosts::Fleet;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Two fast experiments: the fleet's work, not the measuring, is tested.
const ONLY: &str = "cpu.syscall,proc.fork";

fn osprobe(db: &Path) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_TOKEN")
        .env_remove("OSPROBE_DB")
        .arg("--db")
        .arg(db);
    cmd
}

fn fleet_run(fleet: &Fleet, inventory: &str, extra: &[&str]) -> (Output, Value) {
    let inv = fleet.path("hosts.ini");
    std::fs::write(&inv, inventory).unwrap();
    let out = osprobe(&fleet.path("results.db"))
        .args(["fleet", "run", "--inventory"])
        .arg(&inv)
        .arg("-F")
        .arg(fleet.ssh_config())
        .args(["--profile", "smoke", "--only", ONLY, "--json"])
        .args(extra)
        .output()
        .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "fleet run printed no JSON ({e}): stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    common::assert_follows("fleet-run.schema.json", &summary);
    (out, summary)
}

fn stored_run(fleet: &Fleet, id: &str) -> Value {
    let out = osprobe(&fleet.path("results.db"))
        .args(["show", id, "--json"])
        .output()
        .unwrap();
    common::json_of(&out)
}

fn stored_count(fleet: &Fleet) -> usize {
    let out = osprobe(&fleet.path("results.db"))
        .args(["history", "--json"])
        .output()
        .unwrap();
    common::json_of(&out).as_array().unwrap().len()
}

fn host<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == name)
        .unwrap_or_else(|| panic!("no host {name} in {summary}"))
}

#[test]
fn the_smoke_profile_runs_on_every_host_and_is_stored_with_labels() {
    let Some(fleet) = Fleet::start("fleet smoke over three hosts", 3) else {
        return;
    };
    let inventory = format!(
        "[web]\n{}\n{}\n[db]\n{}\n[prod:children]\nweb\ndb\n",
        fleet.host_line(0, ""),
        fleet.host_line(1, ""),
        fleet.host_line(2, "")
    );
    let (out, summary) = fleet_run(&fleet, &inventory, &["--parallel", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{summary}\n{stderr}");
    let mut fleet_ids = Vec::new();
    for (name, group) in [("h1", "prod,web"), ("h2", "prod,web"), ("h3", "db,prod")] {
        let h = host(&summary, name);
        assert_eq!(h["ok"], true, "{h}");
        assert_eq!(h["copied"], true, "the first run copies osprobe: {h}");
        let run = stored_run(&fleet, h["run"].as_str().unwrap());
        assert_eq!(run["labels"]["host"], name);
        assert_eq!(run["labels"]["groups"], group);
        fleet_ids.push(run["labels"]["fleet"].clone());
        assert!(!common::measurements(&run, "cpu.syscall").is_empty());
        assert!(!common::measurements(&run, "proc.fork").is_empty());
        // Each host's copy sits in its own cache directory, runnable.
        let cache = fleet.path(&format!("cache-{name}"));
        let copies: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert_eq!(copies.len(), 1, "{cache:?}");
    }
    assert_eq!(fleet_ids[0], summary["fleet"]);
    assert!(fleet_ids.iter().all(|f| *f == fleet_ids[0]));
    // Not a tty: one progress line per state change on stderr.
    assert!(stderr.contains("copying osprobe"), "{stderr}");
    assert!(stderr.contains("running the smoke profile"), "{stderr}");
    assert_eq!(stored_count(&fleet), 3);

    // Again: the binary is there already and is not copied twice.
    let (out, summary) = fleet_run(&fleet, &inventory, &[]);
    assert!(out.status.success(), "{summary}");
    for name in ["h1", "h2", "h3"] {
        assert_eq!(host(&summary, name)["copied"], false);
    }
    assert_ne!(summary["fleet"], fleet_ids[0]);
    assert_eq!(stored_count(&fleet), 6);
    // The same experiments on two machines, each named by its host label:
    // exit 0 (nothing regressed) or 1 (something did), never a usage error.
    let out = osprobe(&fleet.path("results.db"))
        .args(["compare", "h1:latest", "h3:latest", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");
    let compared: Value = serde_json::from_slice(&out.stdout).expect("compare --json prints JSON");
    let text = compared.to_string();
    assert!(text.contains("h1") && text.contains("h3"), "{text}");
    assert!(text.contains("cpu.syscall"), "{text}");
    let strays = fleet.stray_processes(Duration::from_secs(30));
    assert!(strays.is_empty(), "left running on the hosts: {strays:?}");
}

#[test]
fn a_pair_is_measured_between_two_hosts_and_cleaned_up() {
    let Some(fleet) = Fleet::start("fleet pair", 2) else {
        return;
    };
    let inventory = format!(
        "[lab]\n{}\n{}\n",
        fleet.host_line(0, ""),
        fleet.host_line(1, "")
    );
    let (out, summary) = fleet_run(
        &fleet,
        &inventory,
        &["--pairs", "group:lab", "--pair-tests", "rtt,connect"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{summary}\n{stderr}");
    let pairs = summary["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{summary}");
    for (pair, src, dst) in [("h1 -> h2", "h1", 1), ("h2 -> h1", "h2", 0)] {
        let p = pairs.iter().find(|p| p["pair"] == pair).unwrap();
        assert_eq!(p["ok"], true, "{p}");
        for test in ["rtt", "connect"] {
            let run = stored_run(&fleet, p["runs"][test].as_str().unwrap());
            assert_eq!(run["labels"]["pair"], pair);
            assert_eq!(run["labels"]["host"], src);
            let ms = common::measurements(&run, &format!("net.{test}"));
            assert!(!ms.is_empty(), "{run}");
            // Measured against the other namespace's server, not loopback.
            let to = ms[0]["params"]["to"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(
                to.starts_with(&fleet.hosts[dst].addr),
                "{test} of {pair} went to {to:?}"
            );
        }
    }
    // Two host runs and two tests for each of the two pairs.
    assert_eq!(stored_count(&fleet), 6);
    // The servers stopped and their token files are gone.
    let strays = fleet.stray_processes(Duration::from_secs(30));
    assert!(strays.is_empty(), "left running on the hosts: {strays:?}");
    let leftovers = fleet.tmp_leftovers();
    assert!(
        leftovers.is_empty(),
        "token directories left: {leftovers:?}"
    );
}

#[test]
fn ctrl_c_during_a_pair_stops_the_server_and_removes_the_tokens() {
    use std::io::{BufRead, BufReader};
    let Some(fleet) = Fleet::start("fleet pair interrupted", 2) else {
        return;
    };
    let inv = fleet.path("hosts.ini");
    std::fs::write(
        &inv,
        format!(
            "[lab]\n{}\n{}\n",
            fleet.host_line(0, ""),
            fleet.host_line(1, "")
        ),
    )
    .unwrap();
    let mut child = osprobe(&fleet.path("results.db"))
        .args(["fleet", "run", "--inventory"])
        .arg(&inv)
        .arg("-F")
        .arg(fleet.ssh_config())
        .args(["--profile", "smoke", "--only", ONLY, "--pairs", "all"])
        .args(["--pair-tests", "bandwidth,bandwidth,bandwidth"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first pair's client runs (its server is up).
    let mut seen = Vec::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("pair h1 -> h2: net bandwidth") {
            break;
        }
    }
    // Keep reading, so that the rest of its stderr has somewhere to go.
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    assert!(
        seen.last().is_some_and(|l| l.contains("net bandwidth")),
        "the pair never started: {seen:?}"
    );
    let out = common::interrupt(child, "fleet run interrupted during a pair");
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = drain.join().unwrap();
    assert!(text.contains("h1 -> h2"), "{text}");
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
    // The hosts' runs, stored before the interrupt, are kept.
    assert!(stored_count(&fleet) >= 2);
    let strays = fleet.stray_processes(Duration::from_secs(30));
    assert!(strays.is_empty(), "left running on the hosts: {strays:?}");
    // Generous: on a loaded machine ssh's teardown can take seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !fleet.tmp_leftovers().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        fleet.tmp_leftovers().is_empty(),
        "token directories left: {:?}; processes on the hosts: {:?}",
        fleet.tmp_leftovers(),
        fleet.stray_processes(Duration::ZERO)
    );
}

#[test]
fn an_unreachable_host_is_reported_and_the_others_are_stored() {
    let Some(fleet) = Fleet::start("fleet with an unreachable host", 2) else {
        return;
    };
    // h1's address on a port where nothing listens: refused at once.
    let inventory = format!(
        "[lab]\n{}\n{}\ngone ansible_host={} ansible_port=2 ansible_user=root\n\
         stranger ansible_host={} ansible_user=osprobe-no-such-user\n",
        fleet.host_line(0, ""),
        fleet.host_line(1, ""),
        fleet.hosts[0].addr,
        fleet.hosts[1].addr
    );
    let (out, summary) = fleet_run(&fleet, &inventory, &[]);
    assert_eq!(out.status.code(), Some(1), "{summary}");
    let gone = host(&summary, "gone");
    assert_eq!(gone["ok"], false);
    assert_eq!(gone["run"], Value::Null);
    let why = gone["failure"].as_str().unwrap();
    assert!(why.contains("Connection refused"), "{why}");
    let denied = host(&summary, "stranger");
    let why = denied["failure"].as_str().unwrap();
    assert!(why.contains("Permission denied"), "{why}");
    assert_eq!(host(&summary, "h1")["ok"], true);
    assert_eq!(host(&summary, "h2")["ok"], true);
    assert_eq!(stored_count(&fleet), 2);

    // The text summary names the host and ssh's reason too.
    let out = osprobe(&fleet.path("results.db"))
        .args(["fleet", "run", "--inventory"])
        .arg(fleet.path("hosts.ini"))
        .arg("-F")
        .arg(fleet.ssh_config())
        .args(["--profile", "smoke", "--only", ONLY, "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("gone") && text.contains("Connection refused"),
        "{text}"
    );
    assert!(text.contains("2 of 4 hosts succeeded"), "{text}");
}

#[test]
fn a_host_key_mismatch_shows_ssh_s_own_message() {
    let Some(fleet) = Fleet::start("fleet host key mismatch", 2) else {
        return;
    };
    // h1 listed with h2's key: what a replaced (or impostor) host looks like.
    let wrong = fleet.hosts[1].host_key.clone();
    let config = fleet.write_client_config("wrong_known_hosts", Some((0, &wrong)));
    let inv = fleet.path("hosts.ini");
    std::fs::write(&inv, format!("{}\n", fleet.host_line(0, ""))).unwrap();
    let out = osprobe(&fleet.path("results.db"))
        .args(["fleet", "run", "--inventory"])
        .arg(&inv)
        .arg("-F")
        .arg(&config)
        .args(["--profile", "smoke", "--only", ONLY])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Host key verification failed"), "{text}");
    assert!(
        text.contains("REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "{text}"
    );
    assert!(!fleet.path("cache-h1").exists(), "nothing was copied");
}

#[test]
fn a_fleet_run_with_a_pair_and_an_unreachable_host_into_postgresql() {
    let pg = match osprobe_store::testing::PrivatePostgres::start() {
        Ok(pg) => pg,
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            return;
        }
    };
    let Some(fleet) = Fleet::start("fleet into PostgreSQL", 2) else {
        return;
    };
    let url = pg.url("postgres");
    let inv = fleet.path("hosts.ini");
    std::fs::write(
        &inv,
        format!(
            "[lab]\n{}\n{}\n[lost]\ngone ansible_host={} ansible_port=2\n",
            fleet.host_line(0, ""),
            fleet.host_line(1, ""),
            fleet.nowhere
        ),
    )
    .unwrap();
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .env_remove("OSPROBE_DB")
        .args(["--db", &url, "fleet", "run", "--inventory"])
        .arg(&inv)
        .arg("-F")
        .arg(fleet.ssh_config())
        .args(["--profile", "smoke", "--only", ONLY, "--json"])
        .args(["--pairs", "group:lab", "--pair-tests", "rtt"])
        .args(["--ssh-option", "ConnectTimeout=3"])
        .output()
        .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::assert_follows("fleet-run.schema.json", &summary);
    assert_eq!(out.status.code(), Some(1), "{summary}");
    assert_eq!(host(&summary, "gone")["ok"], false);
    assert_eq!(host(&summary, "h1")["ok"], true, "{summary}");
    assert_eq!(host(&summary, "h2")["ok"], true, "{summary}");
    let history = Command::cargo_bin("osprobe")
        .unwrap()
        .args(["--db", &url, "history", "--json"])
        .output()
        .unwrap();
    let runs = common::json_of(&history);
    // Two hosts' runs and one rtt run for each direction of the pair.
    assert_eq!(runs.as_array().unwrap().len(), 4, "{runs}");
    let pair_run = summary["pairs"][0]["runs"]["rtt"].as_str().unwrap();
    let show = Command::cargo_bin("osprobe")
        .unwrap()
        .args(["--db", &url, "show", pair_run, "--json"])
        .output()
        .unwrap();
    let run = common::json_of(&show);
    assert!(
        run["labels"]["pair"].as_str().unwrap().contains(" -> "),
        "{run}"
    );
    assert_eq!(run["labels"]["groups"], "lab");
}

#[test]
fn a_host_of_another_architecture_is_refused_clearly() {
    let Some(mut fleet) = Fleet::start("fleet architecture mismatch", 1) else {
        return;
    };
    // Sessions on h1 find a `uname` that says aarch64 first in PATH.
    let bin = fleet.path("arm-bin");
    std::fs::create_dir(&bin).unwrap();
    let uname = bin.join("uname");
    std::fs::write(&uname, "#!/bin/sh\necho aarch64\n").unwrap();
    std::fs::set_permissions(&uname, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fleet.restart_sshd(0, &format!("PATH={}:/usr/bin:/bin", bin.display()));
    let (out, summary) = fleet_run(&fleet, &format!("{}\n", fleet.host_line(0, "")), &[]);
    assert_eq!(out.status.code(), Some(1), "{summary}");
    let why = host(&summary, "h1")["failure"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("no binary for aarch64"), "{why}");
    assert!(why.contains(std::env::consts::ARCH), "{why}");
    assert!(!fleet.path("cache-h1").exists(), "nothing was copied");
    assert_eq!(stored_count_or_zero(&fleet), 0);
}

#[test]
fn a_host_that_hangs_is_given_up_after_the_host_timeout() {
    let Some(mut fleet) = Fleet::start("fleet host timeout", 1) else {
        return;
    };
    // On h1, sha256sum (run when the copy has arrived) takes its time.
    let bin = fleet.path("slow-bin");
    std::fs::create_dir(&bin).unwrap();
    let slow = bin.join("sha256sum");
    std::fs::write(&slow, "#!/bin/sh\nsleep 5\nexit 1\n").unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fleet.restart_sshd(0, &format!("PATH={}:/usr/bin:/bin", bin.display()));
    let (out, summary) = fleet_run(
        &fleet,
        &format!("{}\n", fleet.host_line(0, "")),
        &["--host-timeout", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "{summary}");
    let why = host(&summary, "h1")["failure"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("gave up after --host-timeout 1 s"), "{why}");
    // What ran there ends and its partial copy goes.
    let strays = fleet.stray_processes(Duration::from_secs(30));
    assert!(strays.is_empty(), "left running on the hosts: {strays:?}");
    let cached: Vec<_> = std::fs::read_dir(fleet.path("cache-h1"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "{cached:?}");
}

fn stored_count_or_zero(fleet: &Fleet) -> usize {
    if fleet.path("results.db").exists() {
        stored_count(fleet)
    } else {
        0
    }
}

#[test]
fn malformed_inventories_name_the_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    let cases = [
        (
            "hosts.ini",
            "[web]\nh1 ansible_host=10.0.0.1\nh2 ansible_port=ssh\n",
            ":3: host h2: ansible_port 'ssh' is not a port",
        ),
        (
            "hosts.yml",
            "all:\n  hosts:\n    h1:\n  hostz:\n    h2:\n",
            ":4: group 'all': unknown key 'hostz'",
        ),
        ("hosts", "[web\n", ":1: section header"),
    ];
    for (name, text, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = osprobe(&db)
            .args(["fleet", "run", "--inventory"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("{}{expected}", path.display())),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one clear line: {stderr}");
    }
    // An unknown group for --pairs, and a missing file: usage errors too.
    let path = dir.path().join("ok.ini");
    std::fs::write(&path, "[web]\na\nb\n").unwrap();
    let out = osprobe(&db)
        .args(["fleet", "run", "--inventory"])
        .arg(&path)
        .args(["--pairs", "group:db"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no such group"), "{stderr}");
    let out = osprobe(&db)
        .args(["fleet", "run", "--inventory"])
        .arg(dir.path().join("missing.ini"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!db.exists(), "nothing was stored");
}
