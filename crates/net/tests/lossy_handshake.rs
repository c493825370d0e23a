//! The client's handshake ACKs lost on the way to the server (root and
//! nft; CI runs it): the server resends its SYN-ACK 1, 3, 7 and 15 s after
//! the first, and the hello comes only after the one whose ACK arrives.
//! The client waits for it (crate hello_wait) instead of failing at its
//! 10 s reply timeout, as net.udp at 20% emulated loss once did.

use osprobe_link::masquerade;
use osprobe_net::path::Endpoint;
use std::io::Write;
use std::process::{Command, Stdio};

/// In the server's namespace: drop the first four pure ACKs of every
/// connection towards `port` (conntrack counts a connection's packets; the
/// SYN is its first).
fn ruleset(port: u16) -> String {
    format!(
        "table ip osprobe_lossy_handshake {{
  chain input {{
    type filter hook input priority 0;
    tcp dport {port} tcp flags == ack ct original packets < 6 counter drop
  }}
}}
"
    )
}

fn nft(program: &std::path::Path, args: &[&str], stdin: &str) -> std::io::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin was piped")
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "nft {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_hello_behind_four_lost_handshake_acks_still_comes() {
    if !osprobe_core::sys::is_root() {
        osprobe_core::testing::skip("dropping packets in a namespace needs root");
        return;
    }
    let program = match masquerade::nft_program() {
        Ok(p) => p,
        Err(e) => {
            osprobe_core::testing::skip(format!("no nft: {e}"));
            return;
        }
    };
    let endpoint = Endpoint::netns().expect("a namespace with a server");
    let port = endpoint.server_addr().port();
    let namespace = endpoint.namespace().expect("the netns path has one");
    let rules = ruleset(port);
    let in_namespace = program.clone();
    namespace
        .spawn_in(move || {
            nft(&in_namespace, &["-f", "-"], &rules)?;
            // Per namespace, and only once conntrack is loaded (the rule's
            // `ct` loads it): count each connection's packets.
            std::fs::write("/proc/sys/net/netfilter/nf_conntrack_acct", "1")
        })
        .expect("a thread in the namespace")
        .join()
        .unwrap()
        .expect("the drop rule and conntrack accounting");

    let service = endpoint.peer.file_service();
    assert!(
        service.is_ok(),
        "no hello behind lost handshake ACKs: {}",
        service.unwrap_err()
    );
    let listing = namespace
        .spawn_in(move || {
            nft(
                &program,
                &["list", "table", "ip", "osprobe_lossy_handshake"],
                "",
            )
        })
        .expect("a thread in the namespace")
        .join()
        .unwrap()
        .expect("the rule's counter");
    assert!(
        listing.contains("counter packets 4 "),
        "the rule did not drop the four ACKs: {listing}"
    );
}
