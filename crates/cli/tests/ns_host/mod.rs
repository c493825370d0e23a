//! A "real" host for tests: a network namespace joined to this one by a
//! veth pair, reached through this namespace's routing (not through any
//! emulator), with a fixed address of its own and `osprobe serve`s
//! running inside it.
// Each test file uses its own subset.
#![allow(dead_code)]

use osprobe_link::netns::NetnsPair;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Stdio};

/// A namespace host holding `ip`, with the serves started in it; they are
/// killed and the namespace removed on drop.
pub struct NsHost {
    serves: Vec<Child>,
    pub ip: Ipv4Addr,
    // Field order is drop order: the serves are killed (in Drop) first.
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
    /// here through the veth). Its serves die with the thread that starts
    /// them: start them from the thread that drops the host.
    pub fn new(ip: Ipv4Addr) -> NsHost {
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
        NsHost {
            serves: Vec::new(),
            ip,
            pair,
        }
    }

    /// A namespace host with one `osprobe serve extra...`; its HOST:PORT.
    pub fn start(ip: Ipv4Addr, extra: &[&str]) -> (NsHost, String) {
        let mut host = NsHost::new(ip);
        let addr = host.serve(extra);
        (host, addr)
    }

    /// Start `osprobe serve --bind IP:0 extra...` inside; its HOST:PORT.
    pub fn serve(&mut self, extra: &[&str]) -> String {
        let mut serve = self
            .pair
            .command(PathBuf::from(env!("CARGO_BIN_EXE_osprobe")))
            .unwrap()
            .env_remove("OSPROBE_TOKEN")
            .args(["serve", "--bind", &format!("{}:0", self.ip)])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(serve.stdout.take().unwrap());
        self.serves.push(serve);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        // Keep draining, so that the serve never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
        });
        line.split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in: {line:?}"))
            .to_string()
    }

    /// Stop the serve started `n`th (its port then refuses).
    pub fn stop(&mut self, n: usize) {
        let _ = self.serves[n].kill();
        let _ = self.serves[n].wait();
    }
}

impl Drop for NsHost {
    fn drop(&mut self) {
        for serve in &mut self.serves {
            let _ = serve.kill();
            let _ = serve.wait();
        }
    }
}

/// A private token file in a temporary directory.
pub fn token_file(secret: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    (dir, path)
}
