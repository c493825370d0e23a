//! The server's source, udp_sink and crr sessions against well-behaved and
//! hostile clients, over loopback (127.0.0.0/8 only).

mod common;

use common::TestServer;
use osprobe_net::modes::{self, DatagramHeader, UDP_HEADER};
use osprobe_net::protocol::{unhex, TestSpec};
use osprobe_net::server::ServerConfig;
use osprobe_net::sock::ConnectOptions;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn quick_config() -> ServerConfig {
    ServerConfig {
        handshake_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    }
}

fn session_bytes(session: &osprobe_net::client::Session) -> [u8; 16] {
    unhex(session.id()).unwrap().try_into().unwrap()
}

fn datagram(session: [u8; 16], sequence: u64, size: usize) -> Vec<u8> {
    let mut d = vec![0u8; size];
    DatagramHeader {
        session,
        sequence,
        sent_ns: sequence * 1000,
    }
    .write(&mut d);
    d
}

#[test]
fn a_udp_sink_counts_the_sessions_datagrams_and_ignores_the_rest() {
    let server = TestServer::start(quick_config());
    let size = 64;
    let session = server
        .peer(None)
        .open(
            TestSpec::UdpSink { size: size as u32 },
            Duration::from_secs(5),
        )
        .unwrap();
    let control = session.attach(0, &ConnectOptions::default()).unwrap();
    let port = modes::read_announced_port(&control, Duration::from_secs(5)).unwrap();
    let target = SocketAddr::new(server.addr.ip(), port);
    let id = session_bytes(&session);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Ten good datagrams, with 3 and 4 swapped.
    for seq in [0u64, 1, 2, 4, 3, 5, 6, 7, 8, 9] {
        socket.send_to(&datagram(id, seq, size), target).unwrap();
    }
    // Hostile or broken: a wrong session id, a wrong size, a runt, and the
    // right id from another source address (127.0.0.2).
    let mut wrong_id = id;
    wrong_id[0] ^= 0xff;
    socket
        .send_to(&datagram(wrong_id, 100, size), target)
        .unwrap();
    socket
        .send_to(&datagram(id, 101, size + 1), target)
        .unwrap();
    socket.send_to(&[1, 2, 3], target).unwrap();
    let stranger = UdpSocket::bind("127.0.0.2:0").unwrap();
    stranger.send_to(&datagram(id, 102, size), target).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    control.shutdown(Shutdown::Write).unwrap();
    let reports = session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    let report = &reports[0];
    assert!(report.error.is_none(), "{:?}", report.error);
    let counts = report.udp.expect("a UDP report");
    assert_eq!(counts.datagrams, 10);
    assert_eq!(counts.bytes, 10 * size as u64);
    assert_eq!(counts.reordered, 1);
    assert_eq!(counts.highest, 10);
    assert!(counts.jitter_ns.is_finite() && counts.jitter_ns >= 0.0);
    // The port belonged to the session: it is closed now.
    assert!(
        UdpSocket::bind(target).is_ok(),
        "the session's port is released"
    );
}

#[test]
fn a_udp_sink_smaller_than_its_header_is_refused() {
    let server = TestServer::start(quick_config());
    let err = server
        .peer(None)
        .open(
            TestSpec::UdpSink {
                size: UDP_HEADER as u32 - 1,
            },
            Duration::from_secs(5),
        )
        .err()
        .expect("refused");
    assert!(err.to_string().contains("size"), "{err}");
}

#[test]
fn a_crr_listener_answers_the_client_and_closes_on_strangers() {
    let server = TestServer::start(quick_config());
    let session = server
        .peer(None)
        .open(TestSpec::Crr { size: 8 }, Duration::from_secs(5))
        .unwrap();
    let control = session.attach(0, &ConnectOptions::default()).unwrap();
    let port = modes::read_announced_port(&control, Duration::from_secs(5)).unwrap();
    let target = SocketAddr::new(server.addr.ip(), port);
    for _ in 0..5 {
        let mut conn = TcpStream::connect_timeout(&target, Duration::from_secs(2)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.write_all(&[9u8; 8]).unwrap();
        let mut reply = [0u8; 8];
        conn.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [9u8; 8]);
        // The server closes after its response.
        let mut rest = [0u8; 1];
        assert_eq!(conn.read(&mut rest).unwrap(), 0);
    }
    // From another address: closed without an answer.
    let stranger = osprobe_net::sock::connect(
        target,
        &ConnectOptions {
            local_ip: Some("127.0.0.2".parse().unwrap()),
            ..ConnectOptions::default()
        },
        Duration::from_secs(2),
    )
    .unwrap();
    let mut stranger = stranger;
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stranger.write_all(&[9u8; 8]);
    let mut buf = [0u8; 8];
    assert!(
        !matches!(stranger.read(&mut buf), Ok(n) if n > 0),
        "a stranger gets no response"
    );
    // A client that connects and says nothing costs the listener one idle
    // timeout at most, not the session.
    let _silent = TcpStream::connect_timeout(&target, Duration::from_secs(2)).unwrap();
    control.shutdown(Shutdown::Write).unwrap();
    let reports = session.finish(Vec::new(), Duration::from_secs(10)).unwrap();
    assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
    assert_eq!(reports[0].reads, 5, "five transactions served");
    assert_eq!(reports[0].bytes, 40);
}

#[test]
fn a_source_sends_for_its_duration_and_a_client_may_leave_early() {
    let server = TestServer::start(quick_config());
    let open = || {
        server
            .peer(None)
            .open(
                TestSpec::Source {
                    streams: 1,
                    write_size: 65536,
                    duration_ms: 300,
                    cpu: None,
                },
                Duration::from_secs(5),
            )
            .unwrap()
    };
    // Read to the end: the server stops by itself after ~300 ms.
    let session = open();
    let mut stream = session.attach(0, &ConnectOptions::default()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut received = 0u64;
    let mut buf = vec![0u8; 65536];
    loop {
        match stream.read(&mut buf).unwrap() {
            0 => break,
            n => received += n as u64,
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the source ends near its duration"
    );
    let reports = session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
    assert_eq!(reports[0].bytes, received, "every byte sent was received");

    // Leave after the first bytes: not an error at the server.
    let session = open();
    let mut stream = session.attach(0, &ConnectOptions::default()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.read_exact(&mut buf[..1000]).unwrap();
    drop(stream);
    let reports = session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
    assert!(reports[0].bytes >= 1000);
}
