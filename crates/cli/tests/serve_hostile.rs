//! A spawned `osprobe serve` against hostile peers: what reaches its log,
//! its memory under many unauthenticated connections, and --max-bytes.

use assert_cmd::cargo::CommandCargoExt;
use osprobe_net::protocol::{self, Message};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `osprobe serve`; interrupted (and reaped) when dropped.
struct Serve {
    child: Child,
    addr: SocketAddr,
    first_line: String,
}

impl Serve {
    fn start(extra: &[&str]) -> Serve {
        let mut child = Command::cargo_bin("osprobe")
            .unwrap()
            .env_remove("OSPROBE_TOKEN")
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first_line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first_line)
            .unwrap();
        let addr = first_line
            .split_whitespace()
            .find_map(|w| w.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("no address in {first_line:?}"));
        Serve {
            child,
            addr,
            first_line,
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Stop it with SIGINT; everything it printed after the first line.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) of our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let mut out = String::new();
        let _ = self.child.stdout.take().unwrap().read_to_string(&mut out);
        let _ = self.child.wait();
        out
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn greeted(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Hello { .. } => s,
        other => panic!("expected hello, got {other:?}"),
    }
}

#[test]
fn escape_sequences_in_a_hello_never_reach_the_log_raw() {
    let serve = Serve::start(&[]);
    let body = format!(
        r#"{{"type":"hello","protocol":"\u001b[2J\u001b]0;pwned\u0007\nserve: accepted admin","version":2,"nonce":"{}","auth_required":false,"max_duration_s":1}}"#,
        "0".repeat(64)
    );
    let mut s = greeted(serve.addr);
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let _ = protocol::read_message(&mut s);
    let unknown = r#"{"type":"\u001b[31mred\u009b1m"}"#;
    let mut s = greeted(serve.addr);
    s.write_all(&(unknown.len() as u32).to_be_bytes()).unwrap();
    s.write_all(unknown.as_bytes()).unwrap();
    let _ = protocol::read_message(&mut s);
    std::thread::sleep(Duration::from_millis(300));
    let log = serve.stop();
    assert!(log.contains("not an osprobe peer"), "{log}");
    assert!(log.contains("\\x1b[2J"), "shown escaped: {log}");
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{9b}'),
        "{log:?}"
    );
    assert!(
        !log.contains("\nserve: accepted admin"),
        "a forged line: {log}"
    );
}

#[test]
fn rss_stays_bounded_under_500_unauthenticated_huge_claims() {
    let serve = Serve::start(&[]);
    std::thread::sleep(Duration::from_millis(200));
    let before = serve.rss_kib();
    // Each claims a 500 KiB frame (the old limit was 512 KiB, allocated on
    // the claim) and sends 400 KiB of it.
    let body = vec![b' '; 400 * 1024];
    let mut held = Vec::new();
    for _ in 0..500 {
        let mut s = greeted(serve.addr);
        let _ = s.write_all(&(500u32 * 1024).to_be_bytes());
        s.set_nonblocking(true).unwrap();
        held.push((s, 0usize));
    }
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < until && held.iter().any(|(_, sent)| *sent < body.len()) {
        for (s, sent) in held.iter_mut().filter(|(_, sent)| *sent < body.len()) {
            match s.write(&body[*sent..]) {
                Ok(n) => *sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => *sent = body.len(), // cut by the server
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    let grown_mib = serve.rss_kib().saturating_sub(before) / 1024;
    drop(held);
    assert!(grown_mib < 64, "serve's RSS grew by {grown_mib} MiB");
}

#[test]
fn max_bytes_is_shown_and_a_bad_one_is_named() {
    let serve = Serve::start(&["--max-bytes", "1M"]);
    assert!(
        serve.first_line.contains("at most 1M bytes kept"),
        "{}",
        serve.first_line
    );
    drop(serve);
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .args(["serve", "--max-bytes", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-bytes 'lots'"), "{err}");
}
