//! `osprobe link --to HOST`: the emulator in front of a "real" host, a
//! namespace reached through this namespace's routing. The round trip
//! crosses the emulator; nothing is left afterwards, also after kill -9
//! (the next osprobe command sweeps the NAT table and restores forwarding).
//! Root only.

mod common;

use common::{need_root, serialized, NetTraces, TEARDOWN};
use osprobe_link::netns::NetnsPair;
use osprobe_link::{forwarding, masquerade};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn osprobe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_osprobe"));
    cmd.env_remove("OSPROBE_TOKEN").stdin(Stdio::null());
    cmd
}

fn ready() -> bool {
    if !need_root("middlebox") {
        return false;
    }
    if let Err(e) = masquerade::nft_program() {
        osprobe_core::testing::skip(e);
        return false;
    }
    if osprobe_core::find_program("bash").is_none() {
        osprobe_core::testing::skip("bash is needed for its /dev/tcp");
        return false;
    }
    true
}

/// A TCP server in the host namespace answering one line per connection,
/// for up to `connections`; yields the peers it saw.
fn line_echo(
    host: &NetnsPair,
    connections: usize,
) -> (
    SocketAddr,
    std::thread::JoinHandle<io::Result<Vec<SocketAddr>>>,
) {
    let (tx, rx) = mpsc::channel();
    let bind = SocketAddr::from((host.peer_addr(), 0));
    let handle = host
        .spawn_in(move || {
            let listener = TcpListener::bind(bind)?;
            tx.send(listener.local_addr()?).ok();
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut peers = Vec::new();
            while peers.len() < connections && Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut stream, peer)) => {
                        peers.push(peer);
                        stream.set_nonblocking(false)?;
                        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                        let mut buf = [0u8; 64];
                        let n = stream.read(&mut buf)?;
                        stream.write_all(&buf[..n])?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(peers)
        })
        .expect("start the server in the host namespace");
    let addr = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    (addr, handle)
}

fn our_tables(pid: u32) -> Vec<String> {
    masquerade::tables()
        .unwrap()
        .into_iter()
        .filter(|t| t.starts_with(&format!("{}{pid}_", masquerade::TABLE_PREFIX)))
        .collect()
}

#[test]
fn link_to_a_host_puts_the_delay_on_the_path_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let _one = serialized();
    let host = NetnsPair::create().unwrap();
    let egress = host.host_ifname().to_string();
    let (server, peers) = line_echo(&host, 1);
    // Times the connect and one line echoed, in ns, from inside A; bash's
    // /dev/tcp opens the connection.
    let script = format!(
        "t0=$(date +%s%N); exec 3<>/dev/tcp/$OSPROBE_LINK_PEER/{port}; t1=$(date +%s%N); \
         echo hi >&3; read -r line <&3; t2=$(date +%s%N); \
         echo \"$line $((t1 - t0)) $((t2 - t1))\"",
        port = server.port()
    );
    let child = osprobe()
        .args(["link", "--to", &server.ip().to_string(), "--delay", "20ms"])
        .args(["--", "bash", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stderr.contains("middlebox:"), "{stderr}");
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"hi"), "{stdout}");
    let ns = |i: usize| Duration::from_nanos(fields[i].parse().unwrap());
    let (connect, echo) = (ns(1), ns(2));
    // 20 ms each way: a round trip is at least 40 ms.
    assert!(connect >= Duration::from_millis(40), "connect {connect:?}");
    assert!(echo >= Duration::from_millis(40), "echo {echo:?}");
    let seen = peers.join().unwrap().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].ip(),
        std::net::IpAddr::V4(host.host_addr()),
        "not masqueraded"
    );
    // The run's process is gone: its table and forwarding setting with it.
    assert_eq!(forwarding::read(&egress).unwrap(), "0");
    assert!(our_tables(pid).is_empty(), "{:?}", our_tables(pid));
    host.remove().unwrap();
}

#[test]
fn kill_9_of_a_middlebox_is_swept_by_the_next_command() {
    if !ready() {
        return;
    }
    let _one = serialized();
    let host = NetnsPair::create().unwrap();
    let egress = host.host_ifname().to_string();
    let mut child = osprobe()
        .args(["--quiet", "link", "--to", &host.peer_addr().to_string()])
        .args(["--delay", "5ms", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while our_tables(pid).is_empty()
        || !common::children_of(pid).iter().any(|&c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .unwrap_or_default()
                .trim()
                == "sleep"
        })
    {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the middlebox never ran: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let traces = NetTraces::capture(pid);
    assert_eq!(forwarding::read(&egress).unwrap(), "1");
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    child.wait().unwrap();
    // The kernel removes the namespaces, devices and routes...
    let left = traces.wait_until_gone(TEARDOWN);
    assert!(left.is_empty(), "left behind after kill -9: {left:?}");
    // ...and the table and setting wait for the next command's sweep.
    assert_eq!(our_tables(pid).len(), 1);
    let out = osprobe().args(["list"]).output().unwrap();
    assert!(out.status.success());
    assert!(our_tables(pid).is_empty(), "table kept after the sweep");
    assert_eq!(
        forwarding::read(&egress).unwrap(),
        "0",
        "forwarding not restored"
    );
    host.remove().unwrap();
}
