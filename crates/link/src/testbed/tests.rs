//! The path kinds, tested once for every crate that measures over them:
//! each kind starts a server where it should, puts this thread on the
//! client end, and removes what it built when dropped.

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A one-byte echo server, and how many times `find` was asked.
struct Echo {
    found: Vec<String>,
}

impl Servers for Echo {
    type Far = SocketAddr;

    fn start(&mut self, host: &mut ServerHost<'_>) -> Result<SocketAddr, ExperimentError> {
        let bind = any_port(host.ip());
        host.start("echo server", move |stop, ready| {
            let listener = match TcpListener::bind(bind) {
                Ok(l) => l,
                Err(e) => {
                    // Reported once, on the channel the start waits on.
                    let _ = ready.send(Err(e.into()));
                    return Ok(());
                }
            };
            listener.set_nonblocking(true)?;
            let _ = ready.send(listener.local_addr().map_err(Into::into));
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false)?;
                        let mut b = [0u8; 1];
                        if s.read_exact(&mut b).is_ok() {
                            let _ = s.write_all(&b);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            Ok(())
        })
    }

    fn find(&mut self, to: &str) -> Result<(SocketAddr, String), ExperimentError> {
        self.found.push(to.to_string());
        Ok((remote::resolve(to, 5301)?, format!("remote {to}")))
    }
}

fn echo_once(addr: SocketAddr) -> std::io::Result<u8> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(&[42])?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    Ok(b[0])
}

fn this_threads_netns() -> std::path::PathBuf {
    std::fs::read_link("/proc/thread-self/ns/net").unwrap()
}

fn echo() -> Echo {
    Echo { found: Vec::new() }
}

#[test]
fn every_kind_is_named_by_the_path_parameter() {
    assert_eq!(PathKind::of(&Params::new()).unwrap(), PathKind::Loopback);
    for name in PATHS {
        let kind = PathKind::of(&Params::new().with("path", *name)).unwrap();
        assert_eq!(kind.name(), *name);
    }
    let e = PathKind::of(&Params::new().with("path", "wifi"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'wifi'") && e.contains("loopback, netns"), "{e}");
    assert!(PATH_PARAM.parse("remote").is_ok() && PATH_PARAM.parse("lan").is_err());
}

#[test]
fn remote_without_to_is_a_clear_error() {
    let params = Params::new().with("path", "remote");
    let e = Testbed::open(&params, &mut echo())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("--to"), "{e}");
}

#[test]
fn emulation_parameters_need_the_emulated_path() {
    for path in ["loopback", "netns", "remote"] {
        let params = Params::new()
            .with("path", path)
            .with("to", "127.0.0.1")
            .with("delay", "5ms");
        let e = Testbed::open(&params, &mut echo())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("path=emulated"), "{path}: {e}");
    }
}

#[test]
fn loopback_serves_on_127_0_0_1_until_dropped() {
    let testbed = Testbed::open(&Params::new(), &mut echo()).unwrap();
    assert_eq!(testbed.kind, PathKind::Loopback);
    assert!(testbed.far.ip().is_loopback());
    assert_eq!(echo_once(testbed.far).unwrap(), 42);
    assert!(testbed.namespace().is_none() && testbed.emulated_link().is_none());
}

#[test]
fn remote_finds_the_servers_and_builds_nothing() {
    let mut servers = echo();
    let params = Params::new()
        .with("path", "remote")
        .with("to", "127.0.0.1:7001");
    let testbed = Testbed::open(&params, &mut servers).unwrap();
    assert_eq!(testbed.far, "127.0.0.1:7001".parse().unwrap());
    assert_eq!(testbed.description, "remote 127.0.0.1:7001");
    assert_eq!(servers.found, vec!["127.0.0.1:7001".to_string()]);
    assert!(testbed._threads.is_empty() && testbed.namespace().is_none());
}

#[test]
fn netns_serves_from_a_second_host() {
    if let Err(reason) = PathKind::Netns.available() {
        osprobe_core::testing::skip(format!("cannot build network namespaces: {reason}"));
        return;
    }
    let before = this_threads_netns();
    let testbed = Testbed::open(&Params::new().with("path", "netns"), &mut echo()).unwrap();
    let pair = testbed.namespace().expect("a namespace");
    assert_eq!(testbed.far.ip(), IpAddr::V4(pair.peer_addr()));
    assert!(testbed.description.contains(pair.name()));
    assert_eq!(echo_once(testbed.far).unwrap(), 42);
    // The client end of a netns path is this host: the thread stays.
    assert_eq!(this_threads_netns(), before);
}

#[test]
fn emulated_puts_this_thread_in_side_a_until_dropped() {
    if let Err(reason) = PathKind::Emulated.available() {
        osprobe_core::testing::skip(format!("cannot run the link emulator: {reason}"));
        return;
    }
    let before = this_threads_netns();
    let params = Params::new().with("path", "emulated").with("delay", "1ms");
    let testbed = Testbed::open(&params, &mut echo()).unwrap();
    let link = testbed.emulated_link().expect("a link").link();
    assert_eq!(testbed.far.ip(), IpAddr::V4(link.addr_b()));
    assert_ne!(this_threads_netns(), before, "this thread is in side A");
    // A thread started now is on the client end too.
    let far = testbed.far;
    let echoed = std::thread::spawn(move || echo_once(far)).join().unwrap();
    assert_eq!(echoed.unwrap(), 42);
    assert!(
        testbed.description.contains("round trip 2 ms"),
        "{}",
        testbed.description
    );
    let c = testbed.emulated_link().unwrap().counters();
    assert!(c.uplink.packets_out > 0 && c.downlink.packets_out > 0);
    drop(testbed);
    assert_eq!(this_threads_netns(), before, "back home after drop");
}

#[test]
fn emulated_with_to_names_the_fifth_kind() {
    let params = Params::new()
        .with("path", "emulated")
        .with("to", "198.18.100.2");
    let kind = PathKind::of(&params).unwrap();
    assert_eq!(kind, PathKind::EmulatedTo);
    assert!(kind.is_remote() && kind.is_emulated());
    assert!(PathKind::Remote.is_remote() && !PathKind::Remote.is_emulated());
    assert!(!PathKind::Emulated.is_remote() && PathKind::Emulated.is_emulated());
}

#[test]
fn emulated_in_front_of_loopback_is_refused_before_building() {
    let params = Params::new()
        .with("path", "emulated")
        .with("to", "127.0.0.1:5301")
        .with("delay", "1ms");
    let mut servers = echo();
    let e = Testbed::open(&params, &mut servers)
        .err()
        .unwrap()
        .to_string();
    // Refused for the address (or, without root, for the emulator).
    assert!(e.contains("loopback") || e.contains("cannot run"), "{e}");
    assert!(servers.found.is_empty(), "nothing asked of the far end");
}

/// A "real" host: a namespace reached through this namespace's routing
/// (its veth), not through the emulator's own devices; the testbed puts
/// the emulator in front of it and this thread behind the emulator.
#[test]
fn emulated_in_front_of_a_host_crosses_the_emulator_and_leaves_nothing() {
    if let Err(reason) = PathKind::EmulatedTo.available() {
        osprobe_core::testing::skip(format!(
            "cannot put the emulator in front of a host: {reason}"
        ));
        return;
    }
    let host = NetnsPair::create().unwrap();
    let egress = host.host_ifname().to_string();
    let spawn = |body: ServeBody| host.spawn_in(body);
    let (server, threads) = start_on(host.peer_addr(), &spawn, &mut echo()).unwrap();
    let before = this_threads_netns();
    let params = Params::new()
        .with("path", "emulated")
        .with("to", server.to_string().as_str())
        .with("delay", "1ms");
    let mut servers = echo();
    let testbed = Testbed::open(&params, &mut servers).unwrap();
    assert_eq!(testbed.kind, PathKind::EmulatedTo);
    assert_eq!(testbed.far, server, "the far end is the host's server");
    assert_eq!(servers.found, vec![server.to_string()]);
    assert_ne!(this_threads_netns(), before, "this thread is in side A");
    assert_eq!(echo_once(testbed.far).unwrap(), 42);
    let emulated = testbed.emulated_link().expect("an emulated link");
    assert!(emulated.middlebox().is_some());
    let c = emulated.counters();
    assert!(c.uplink.packets_out > 0 && c.downlink.packets_out > 0);
    assert!(
        testbed.description.contains("in front of") && testbed.description.contains("2 ms"),
        "{}",
        testbed.description
    );
    // (/proc/sys/net here would be A's: forwarding is checked after.)
    drop(testbed);
    assert_eq!(this_threads_netns(), before, "back home after drop");
    assert_eq!(
        crate::forwarding::read(&egress).unwrap(),
        "0",
        "forwarding restored"
    );
    let ours = format!("{}{}_", crate::masquerade::TABLE_PREFIX, std::process::id());
    let left: Vec<String> = crate::masquerade::tables()
        .unwrap()
        .into_iter()
        .filter(|t| t.starts_with(&ours))
        .collect();
    assert!(left.is_empty(), "NAT tables left: {left:?}");
    drop(threads);
    host.remove().unwrap();
}
