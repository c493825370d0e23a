//! The emulator as a middlebox in front of a "real" host (root; CI runs
//! them): the host is a namespace reached through this namespace's own
//! routing (its veth's connected route), not through the emulator's veth.

mod common;

use common::{can_run, exclusive, Traces};
use osprobe_core::owner::Owner;
use osprobe_link::middlebox::{self, Middlebox};
use osprobe_link::netns::NetnsPair;
use osprobe_link::{forwarding, masquerade, DirectionConfig, LinkConfig};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DELAY: Duration = Duration::from_millis(25);

fn can_run_middlebox() -> bool {
    if !can_run() {
        return false;
    }
    match middlebox::check_requirements() {
        Ok(()) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("cannot run the middlebox: {e}"));
            false
        }
    }
}

/// A TCP echo in the host namespace; yields the peer address it saw.
fn echo_server(host: &NetnsPair) -> (SocketAddr, std::thread::JoinHandle<io::Result<SocketAddr>>) {
    let (tx, rx) = mpsc::channel();
    let bind = SocketAddr::from((host.peer_addr(), 0));
    let handle = host
        .spawn_in(move || {
            let listener = TcpListener::bind(bind)?;
            tx.send(listener.local_addr()?).ok();
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + Duration::from_secs(20);
            let (mut stream, peer) = loop {
                match listener.accept() {
                    Ok(accepted) => break accepted,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err(io::Error::other("no connection within 20 s"));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e),
                }
            };
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut buf = [0u8; 64];
            let n = stream.read(&mut buf)?;
            stream.write_all(&buf[..n])?;
            // Wait for the client to close, so the reply is not cut short.
            let _ = stream.read(&mut buf);
            Ok(peer)
        })
        .expect("start the echo server in the host namespace");
    let addr = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the echo server reports its address");
    (addr, handle)
}

fn nft_tables() -> Vec<String> {
    masquerade::tables().expect("nft list tables")
}

fn ip(args: &[&str]) -> String {
    let out = Command::new(osprobe_core::find_program("ip").unwrap_or("/usr/sbin/ip".into()))
        .args(args)
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_real_host_behind_the_middlebox_sees_the_delay_and_this_hosts_address() {
    if !can_run_middlebox() {
        return;
    }
    let _one = exclusive();
    let host = NetnsPair::create().expect("the host namespace");
    let egress = host.host_ifname().to_string();
    let forwarding_before = forwarding::read(&egress).unwrap();
    let ip_forward_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let (server, echo) = echo_server(&host);

    let mb = Middlebox::start(
        IpAddr::V4(host.peer_addr()),
        LinkConfig::symmetric(DirectionConfig::delay(DELAY)),
    )
    .expect("start the middlebox");
    assert_eq!(mb.route().device, egress, "{:?}", mb.route());
    assert!(!mb.route().local);
    let traces = Traces::of(mb.link());
    let addr_a = mb.addr_a();
    let ours: Vec<String> = nft_tables()
        .into_iter()
        .filter(|t| t.contains(&format!("_{}_", std::process::id())))
        .collect();
    assert!(!ours.is_empty(), "no masquerade table while running");
    assert_eq!(forwarding::read(&egress).unwrap(), "1");

    let (connect, round_trip) = mb
        .spawn_in_a(move || {
            let start = Instant::now();
            let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
            let connect = start.elapsed();
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            let start = Instant::now();
            stream.write_all(b"ping")?;
            let mut buf = [0u8; 4];
            stream.read_exact(&mut buf)?;
            let round_trip = start.elapsed();
            assert_eq!(&buf, b"ping");
            Ok((connect, round_trip))
        })
        .unwrap()
        .join()
        .unwrap()
        .expect("connect and echo from namespace A");
    let seen_from = echo.join().unwrap().expect("the echo server");
    let counters = mb.link().counters();
    let report = mb.stop();

    eprintln!("connect {connect:?}, echo round trip {round_trip:?}, host saw {seen_from}");
    // Both cross the emulator both ways: at least twice the one-way delay.
    assert!(connect >= 2 * DELAY, "connect took {connect:?}");
    assert!(round_trip >= 2 * DELAY, "echo took {round_trip:?}");
    // Masqueraded: the host saw this host's address on its network, not A's.
    assert_eq!(seen_from.ip(), IpAddr::V4(host.host_addr()));
    assert_ne!(seen_from.ip(), IpAddr::V4(addr_a));
    assert!(counters.uplink.packets_out >= 3, "{counters:?}");
    assert!(counters.downlink.packets_out >= 2, "{counters:?}");
    assert!(report.cleanup_error.is_none(), "{report:?}");

    // Nothing left: the table, the forwarding setting, the route to A, the
    // namespaces; the global switch never changed.
    let left: Vec<String> = nft_tables()
        .into_iter()
        .filter(|t| ours.contains(t))
        .collect();
    assert!(left.is_empty(), "tables left: {left:?}");
    assert_eq!(forwarding::read(&egress).unwrap(), forwarding_before);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        ip_forward_before
    );
    let route = ip(&["-4", "route", "show", &format!("{addr_a}/32")]);
    assert!(route.trim().is_empty(), "route to A left: {route}");
    let mut leftovers = Vec::new();
    for _ in 0..100 {
        leftovers = traces.leftovers();
        if leftovers.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    host.remove().unwrap();
}

#[test]
fn bad_destinations_are_refused_before_anything_is_built() {
    for (to, needle) in [
        ("::1", "IPv4 only"),
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "one host"),
    ] {
        let e = Middlebox::start(to.parse().unwrap(), LinkConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle) && e.contains(to), "{to}: {e}");
    }
}

#[test]
fn what_a_killed_middlebox_left_is_swept() {
    if !can_run_middlebox() {
        return;
    }
    // Every claim sweeps dead owners' records first (ForwardingClaim::acquire),
    // so a claim made by a test running beside this one would remove the
    // record planted below before our sweep counts it ("removed 1", 2 in 20
    // runs with 4 test threads): the tests that claim hold the same lock.
    let _one = exclusive();
    // A process that is gone by the time of the sweep, as if killed while
    // its middlebox ran.
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let dead = Owner::of_pid(child.id()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!dead.is_alive());

    let host = NetnsPair::create().expect("a device to claim");
    let dev = host.host_ifname().to_string();
    assert_eq!(forwarding::read(&dev).unwrap(), "0");
    // What the dead middlebox had done: forwarding on (original recorded)
    // and its masquerade table.
    std::fs::create_dir_all(forwarding::RECORD_DIR).unwrap();
    let record = std::path::Path::new(forwarding::RECORD_DIR)
        .join(format!("{}-{}-0-{dev}", dead.pid, dead.start));
    std::fs::write(&record, "0\n").unwrap();
    std::fs::write(format!("/proc/sys/net/ipv4/conf/{dev}/forwarding"), "1").unwrap();
    let table = format!("{}{}_{}_0", masquerade::TABLE_PREFIX, dead.pid, dead.start);
    let status = Command::new(masquerade::nft_program().unwrap())
        .args(["add", "table", "ip", &table])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(nft_tables().contains(&table));

    let removed = middlebox::sweep_stale();
    assert!(removed >= 2, "removed {removed}");
    assert!(!nft_tables().contains(&table), "table {table} kept");
    assert!(!record.exists(), "record kept");
    assert_eq!(
        forwarding::read(&dev).unwrap(),
        "0",
        "forwarding not restored"
    );
    host.remove().unwrap();
}

#[test]
fn claims_on_one_device_share_the_original_and_the_last_restores_it() {
    if !can_run_middlebox() {
        return;
    }
    // A claim sweeps: not beside what_a_killed_middlebox_left_is_swept.
    let _one = exclusive();
    let host = NetnsPair::create().expect("a device to claim");
    let dev = host.host_ifname().to_string();
    assert_eq!(forwarding::read(&dev).unwrap(), "0");
    let first = forwarding::ForwardingClaim::acquire(&dev).unwrap();
    let second = forwarding::ForwardingClaim::acquire(&dev).unwrap();
    assert_eq!(forwarding::read(&dev).unwrap(), "1");
    first.release().unwrap();
    assert_eq!(
        forwarding::read(&dev).unwrap(),
        "1",
        "released while claimed"
    );
    drop(second);
    assert_eq!(forwarding::read(&dev).unwrap(), "0");
    host.remove().unwrap();
}
