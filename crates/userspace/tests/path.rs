//! The emulated path end to end (root; CI runs it): a thread in A reaches
//! a listener in B across the emulator, with the configured delay.

mod common;

use common::{can_run, exclusive};
use osprobe_userspace::{EmulatedPath, PathConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn a_to_b_crosses_the_emulator_with_its_delay() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let path = EmulatedPath::open(&PathConfig {
        delay: Duration::from_millis(5),
        loss_percent: 0.0,
        rate_bps: None,
        wmem: None,
        mtu: osprobe_userspace::path::PATH_MTU,
    })
    .unwrap();
    assert_eq!(path.round_trip(), Duration::from_millis(10));
    let listen = SocketAddr::from((path.addr_b(), 0));
    let listener = path
        .spawn_in_b(move || TcpListener::bind(listen))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let target = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept()?;
        let mut got = Vec::new();
        conn.read_to_end(&mut got)?;
        Ok::<_, std::io::Error>(got)
    });
    let elapsed = path
        .spawn_in_a(move || {
            let start = Instant::now();
            let mut conn = TcpStream::connect(target)?;
            let handshake = start.elapsed();
            conn.write_all(b"across the emulator")?;
            Ok(handshake)
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let got = server.join().unwrap().unwrap();
    assert_eq!(got, b"across the emulator");
    // The handshake took at least the configured round trip.
    assert!(elapsed >= Duration::from_millis(10), "{elapsed:?}");
    let counters = path.link().counters();
    assert!(counters.uplink.packets_out >= 3, "{counters:?}");
    assert!(
        path.describe().contains("round trip 10 ms"),
        "{}",
        path.describe()
    );
}
