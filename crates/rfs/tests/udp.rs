//! The UDP read path at speed, over real sockets on 127.0.0.1: the
//! server's batches (several requests per recvmmsg, replies gathered from
//! the file's mapped pages, sent with one sendmmsg) and the client's
//! (several replies per recvmmsg, straight into their places), through
//! loss, several clients at once and a file that shrinks while it is read.

mod common;

use common::{data, options, TestServer};
use osprobe_rfs::{
    Client, LossyRelay, OpenMode, RelayOptions, ServerOptions, Transport, Transports,
};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[test]
fn reads_in_place_survive_datagrams_lost_from_their_batches() {
    let export = tempfile::tempdir().unwrap();
    let content = data((4 << 20) + 777, 11);
    std::fs::write(export.path().join("f"), &content).unwrap();
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let relay = LossyRelay::start(
        server.addr,
        RelayOptions {
            loss: 0.1,
            seed: 21,
            ..Default::default()
        },
    )
    .unwrap();
    let mut c = Client::connect(relay.addr(), options(Transport::Udp, 32, 32 << 10)).unwrap();
    let fd = c.open("f", OpenMode::Read).unwrap();
    for round in 0..2 {
        let mut buf = vec![0u8; content.len() + 5000];
        let n = c.read_at(fd, 0, &mut buf).unwrap();
        assert_eq!(n, content.len(), "round {round}");
        assert!(buf[..n] == content[..], "round {round}: the bytes differ");
    }
    assert!(relay.stats().dropped > 0, "{:?}", relay.stats());
    assert!(c.stats().retransmissions > 0, "{:?}", c.stats());
}

#[test]
fn several_clients_get_their_own_replies_from_shared_batches() {
    let export = tempfile::tempdir().unwrap();
    let files: Vec<Vec<u8>> = (0..4)
        .map(|i| data((1 << 20) + i * 4099, 30 + i as u64))
        .collect();
    for (i, f) in files.iter().enumerate() {
        std::fs::write(export.path().join(format!("f{i}")), f).unwrap();
    }
    let server = TestServer::start(
        export.path(),
        Transports::UDP,
        ServerOptions {
            udp_workers: 2,
            ..Default::default()
        },
    );
    std::thread::scope(|s| {
        for (i, content) in files.iter().enumerate() {
            let addr = server.addr;
            s.spawn(move || {
                let mut c = Client::connect(addr, options(Transport::Udp, 32, 32 << 10)).unwrap();
                let fd = c.open(&format!("f{i}"), OpenMode::Read).unwrap();
                for round in 0..4 {
                    let mut buf = vec![0u8; content.len()];
                    assert_eq!(c.read_at(fd, 0, &mut buf).unwrap(), content.len());
                    assert!(
                        buf == *content,
                        "client {i} round {round}: the bytes differ"
                    );
                }
            });
        }
    });
}

#[test]
fn a_file_shrinking_and_growing_under_reads_gives_only_its_bytes() {
    let export = tempfile::tempdir().unwrap();
    // Whole pages: while the file is rewritten its end stays on a page
    // boundary, so every byte before the end is the content's.
    let content = data(1 << 20, 41);
    let path = export.path().join("f");
    std::fs::write(&path, &content).unwrap();
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mut rewrites = 0;
            while !stop.load(Ordering::Relaxed) {
                f.set_len(0).unwrap();
                f.write_all_at(&content, 0).unwrap();
                rewrites += 1;
            }
            rewrites
        });
        let mut c = Client::connect(server.addr, options(Transport::Udp, 32, 32 << 10)).unwrap();
        let fd = c.open("f", OpenMode::Read).unwrap();
        let start = Instant::now();
        let mut reads = 0;
        while start.elapsed() < Duration::from_secs(2) || reads < 20 {
            let mut buf = vec![0u8; content.len()];
            let n = c.read_at(fd, 0, &mut buf).unwrap();
            assert!(
                buf[..n] == content[..n],
                "read {reads}: bytes not the file's"
            );
            reads += 1;
        }
        stop.store(true, Ordering::Relaxed);
        assert!(writer.join().unwrap() > 0);
    });
}

#[test]
fn reads_over_ipv6_loopback_come_back_whole() {
    let export = tempfile::tempdir().unwrap();
    let content = data((1 << 20) + 99, 51);
    std::fs::write(export.path().join("f"), &content).unwrap();
    let addr: std::net::SocketAddr = "[::1]:0".parse().unwrap();
    if std::net::UdpSocket::bind(addr).is_err() {
        osprobe_core::testing::skip("no IPv6 loopback (::1) here");
        return;
    }
    let server = TestServer::start_at(
        addr,
        export.path(),
        Transports::UDP,
        ServerOptions::default(),
    );
    let mut c = Client::connect(server.addr, options(Transport::Udp, 32, 32 << 10)).unwrap();
    let fd = c.open("f", OpenMode::Read).unwrap();
    let mut buf = vec![0u8; content.len()];
    assert_eq!(c.read_at(fd, 0, &mut buf).unwrap(), content.len());
    assert!(buf == content, "the bytes differ over IPv6");
}
