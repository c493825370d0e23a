//! A "real" host for tests: a network namespace joined to this one by a
//! veth pair, reached through this namespace's routing (not through any
//! emulator), with a fixed address of its own and an `osprobe serve`
//! running inside it.
// Each test file uses its own subset.
#![allow(dead_code)]

use osprobe_link::netns::NetnsPair;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Stdio};

/// A namespace host with an `osprobe serve` inside, listening on `ip`;
/// the serve is killed and the namespace removed on drop.
pub struct NsHost {
    serve: Child,
    /// HOST:PORT of the serve.
    pub addr: String,
    pub ip: Ipv4Addr,
    // Field order is drop order: the serve is killed (in Drop) first.
    pub pair: NetnsPair,
}

/// iproute2's `ip` here, failing the test on error.
fn ip_here(args: &[&str]) {
    let out = std::process::Command::new(super::common::ip_program())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

impl NsHost {
    /// A namespace holding `ip` (a /32 beside the pair's own /30, routed
    /// here through the veth) with `osprobe serve --bind ip:0 extra...`.
    /// Spawn from the thread that drops it: the serve dies with its thread.
    pub fn start(ip: Ipv4Addr, extra: &[&str]) -> NsHost {
        let pair = NetnsPair::create().expect("a namespace host");
        let cidr = format!("{ip}/32");
        pair.ip(&["addr", "add", &cidr, "dev", pair.peer_ifname()])
            .expect("the host's address");
        // The route goes with the veth when the namespace goes.
        ip_here(&[
            "route",
            "add",
            &cidr,
            "via",
            &pair.peer_addr().to_string(),
            "dev",
            pair.host_ifname(),
        ]);
        let mut serve = pair
            .command(PathBuf::from(env!("CARGO_BIN_EXE_osprobe")))
            .unwrap()
            .env_remove("OSPROBE_TOKEN")
            .args(["serve", "--bind", &format!("{ip}:0")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(serve.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        // Keep draining, so that the serve never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
        });
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in: {line:?}"))
            .to_string();
        NsHost {
            serve,
            addr,
            ip,
            pair,
        }
    }
}

impl Drop for NsHost {
    fn drop(&mut self) {
        let _ = self.serve.kill();
        let _ = self.serve.wait();
    }
}

/// A private token file in a temporary directory.
pub fn token_file(secret: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    (dir, path)
}
