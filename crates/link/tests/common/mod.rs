//! Helpers for the end-to-end tests: the root check, serialisation of the
//! timing-sensitive tests, a UDP echo and sink inside a namespace, and the
//! leftover check.

#![allow(dead_code)]

use osprobe_link::{check_requirements, Link};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// True when the emulator can run here; prints why not otherwise. CI runs
/// as root, so there a missing requirement fails the test.
pub fn can_run() -> bool {
    match check_requirements() {
        Ok(()) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("cannot run the link emulator: {e}"));
            false
        }
    }
}

/// One timing-sensitive test at a time: on two vCPUs, two links forwarding
/// at once would disturb each other's figures. Tests that sweep, or claim
/// forwarding (a claim sweeps too), hold it as well: a sweep beside them
/// would take the leftovers they plant and count.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A UDP socket in B that echoes (or only counts) datagrams until stopped.
pub struct UdpPeer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<u64>>>,
}

impl Drop for UdpPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl UdpPeer {
    /// Bind on B's address; `echo` sends every datagram back.
    pub fn start(link: &Link, echo: bool) -> UdpPeer {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let bind = SocketAddr::from((link.addr_b(), 0));
        let flag = Arc::clone(&stop);
        let handle = link
            .spawn_in_b(move || {
                let socket = UdpSocket::bind(bind)?;
                set_rcvbuf(&socket, 4 << 20);
                socket.set_read_timeout(Some(Duration::from_millis(50)))?;
                tx.send(socket.local_addr()?).ok();
                let mut received = 0u64;
                let mut buf = [0u8; 2048];
                // Bounded: stopped by the test, or after a minute at most.
                let deadline = Instant::now() + Duration::from_secs(60);
                while !flag.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match socket.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            received += 1;
                            if echo {
                                socket.send_to(&buf[..n], from)?;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(received)
            })
            .expect("start the UDP peer in B");
        let addr = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the UDP peer reports its address");
        UdpPeer {
            addr,
            stop,
            handle: Some(handle),
        }
    }

    /// Stop and return how many datagrams arrived.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .expect("not finished yet")
            .join()
            .expect("UDP peer thread")
            .expect("UDP peer")
    }
}

pub fn set_rcvbuf(socket: &UdpSocket, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt reads one int from a live variable.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Round trips of `count` UDP probes from A to the echo at `peer`, one at a
/// time, `gap` apart; lost probes are left out.
pub fn udp_rtts(link: &Link, peer: SocketAddr, count: usize, gap: Duration) -> Vec<Duration> {
    let bind = SocketAddr::from((link.addr_a(), 0));
    link.spawn_in_a(move || {
        let socket = UdpSocket::bind(bind)?;
        socket.connect(peer)?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..count as u64 {
            let start = Instant::now();
            socket.send(&i.to_be_bytes())?;
            // Skip stale replies to earlier, late probes.
            loop {
                match socket.recv(&mut buf) {
                    Ok(8) if buf[..8] == i.to_be_bytes() => {
                        rtts.push(start.elapsed());
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
            std::thread::sleep(gap);
        }
        Ok(rtts)
    })
    .expect("start the prober in A")
    .join()
    .expect("prober thread")
    .expect("prober")
}

pub fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// Names of the link's namespaces and addresses, to look for afterwards.
#[derive(Debug, Clone)]
pub struct Traces {
    pub namespaces: Vec<String>,
    pub addrs: Vec<Ipv4Addr>,
}

impl Traces {
    pub fn of(link: &Link) -> Traces {
        Traces {
            namespaces: vec![link.namespace_a().into(), link.namespace_b().into()],
            addrs: vec![link.addr_a(), link.addr_b()],
        }
    }

    /// Everything of the link still visible: namespaces, links named like
    /// them or like its TUN devices, and routes or addresses in its /30s.
    pub fn leftovers(&self) -> Vec<String> {
        let ip = |args: &[&str]| {
            let out =
                Command::new(osprobe_core::find_program("ip").unwrap_or("/usr/sbin/ip".into()))
                    .args(args)
                    .output()
                    .expect("run ip");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let mut found = Vec::new();
        let namespaces = ip(&["netns", "list"]);
        let links = ip(&["-o", "link", "show"]);
        let routes = ip(&["-4", "route", "show", "table", "all"]);
        let addrs = ip(&["-o", "-4", "addr", "show"]);
        for ns in &self.namespaces {
            if namespaces
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns))
            {
                found.push(format!("namespace {ns}"));
            }
            if std::path::Path::new("/run/netns").join(ns).exists() {
                found.push(format!("/run/netns/{ns}"));
            }
            if links.contains(&format!(" {ns}:")) || links.contains(&format!(" {ns}@")) {
                found.push(format!("link {ns}"));
            }
        }
        if links.contains("osprobe-tun") || links.contains("osprobe-ref") {
            found.push(format!(
                "a TUN or reference device in this namespace: {links}"
            ));
        }
        for addr in &self.addrs {
            // The /30's network prefix: a.b.c.(d & !3).
            let o = addr.octets();
            let prefix = format!("{}.{}.{}.", o[0], o[1], o[2]);
            let net = o[3] & !3;
            for text in [&routes, &addrs] {
                for line in text.lines() {
                    // net + 3 <= 255; `net..net + 4` overflowed for the
                    // last /30 of a /24 (.252).
                    let hit = (net..=net + 3).any(|last| {
                        line.split_whitespace()
                            .any(|w| w.split('/').next() == Some(&format!("{prefix}{last}")))
                    });
                    if hit {
                        found.push(format!("route or address: {line}"));
                    }
                }
            }
        }
        found
    }
}
