//! `osprobe serve` against hostile peers on loopback: relayed proofs, old
//! peers, floods of slow and idle connections, huge frame claims, escape
//! sequences, token guessing. Each test is bounded to seconds and cleans
//! up its sockets and server thread, also when it fails.

mod common;

use common::TestServer;
use osprobe_net::auth::{self, Purpose};
use osprobe_net::protocol::{self, ErrorCode, Message, TestSpec, PROTOCOL_VERSION};
use osprobe_net::server::ServerConfig;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn sink(streams: u32) -> TestSpec {
    TestSpec::Sink {
        streams,
        read_size: 65536,
        cpu: None,
    }
}

/// A raw connection that has read the server's hello; returns its nonce.
fn greeted(addr: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Hello { nonce, .. } => (s, nonce),
        other => panic!("expected hello, got {other:?}"),
    }
}

fn token_config() -> ServerConfig {
    ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::default()
    }
}

#[test]
fn a_proof_for_one_test_cannot_open_another() {
    let server = TestServer::start(token_config());
    // What a hostile server relaying a client's proof would hold: a proof
    // for the client's test (one stream) over the real server's nonce.
    let (mut s, nonce) = greeted(server.addr);
    let asked = sink(1);
    let proof = auth::proof(
        "s3cret",
        &nonce,
        Purpose::Open {
            test: &asked,
            duration_s: 5,
        },
    );
    let relayed = Message::Open {
        version: PROTOCOL_VERSION,
        proof: Some(proof.clone()),
        duration_s: 5,
        test: sink(64),
    };
    protocol::write_message(&mut s, &relayed).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Error { code, .. } => assert_eq!(code, ErrorCode::Auth),
        other => panic!("a proof for another test opened a session: {other:?}"),
    }
    // The same proof for a longer duration is refused too; for the test it
    // was made for it is accepted (on a fresh connection, with its nonce).
    let (mut s, nonce) = greeted(server.addr);
    let open = |duration_s, proof| Message::Open {
        version: PROTOCOL_VERSION,
        proof: Some(proof),
        duration_s,
        test: sink(1),
    };
    let purpose = Purpose::Open {
        test: &asked,
        duration_s: 5,
    };
    protocol::write_message(&mut s, &open(60, auth::proof("s3cret", &nonce, purpose))).unwrap();
    assert!(matches!(
        protocol::read_message(&mut s).unwrap(),
        Message::Error {
            code: ErrorCode::Auth,
            ..
        }
    ));
    let (mut s, nonce) = greeted(server.addr);
    protocol::write_message(&mut s, &open(5, auth::proof("s3cret", &nonce, purpose))).unwrap();
    assert!(matches!(
        protocol::read_message(&mut s).unwrap(),
        Message::Opened { .. }
    ));
}

#[test]
fn an_old_client_is_told_both_versions() {
    let server = TestServer::start(ServerConfig::default());
    let (mut s, _) = greeted(server.addr);
    let old = Message::Open {
        version: 1,
        proof: None,
        duration_s: 5,
        test: sink(1),
    };
    protocol::write_message(&mut s, &old).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Error { code, message } => {
            assert_eq!(code, ErrorCode::Version);
            assert!(
                message.contains("version 1") && message.contains(&PROTOCOL_VERSION.to_string()),
                "{message}"
            );
        }
        other => panic!("an old client was served: {other:?}"),
    }
}

/// Send a frame header claiming `claim` bytes, then one body byte every
/// `every` until the server answers or closes; how long that took, or None
/// if it still had not after `give_up`.
fn trickle_until_cut(
    addr: SocketAddr,
    claim: u32,
    every: Duration,
    give_up: Duration,
) -> Option<Duration> {
    use std::io::{Read, Write};
    let (mut s, _) = greeted(addr);
    let started = std::time::Instant::now();
    s.write_all(&claim.to_be_bytes()).unwrap();
    s.set_read_timeout(Some(every)).unwrap();
    let mut buf = [0u8; 256];
    while started.elapsed() < give_up {
        match s.read(&mut buf) {
            Ok(_) => return Some(started.elapsed()), // an error frame, or EOF
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(started.elapsed()), // reset
        }
        if s.write_all(b" ").is_err() {
            return Some(started.elapsed());
        }
    }
    None
}

#[test]
fn a_trickling_handshake_is_cut_at_a_total_deadline() {
    let server = TestServer::start(ServerConfig {
        handshake_timeout: Duration::from_millis(800),
        ..ServerConfig::default()
    });
    // 100 bytes at one per 100 ms would take 10 s; each byte arrives well
    // within any per-read timeout, so only a total deadline cuts it.
    let cut = trickle_until_cut(
        server.addr,
        100,
        Duration::from_millis(100),
        Duration::from_secs(8),
    );
    assert!(cut.is_some(), "the trickle held its connection for 8 s");
    let events = server.events_once(|e| e.contains("timed out"), Duration::from_secs(2));
    assert!(events.iter().any(|e| e.contains("timed out")), "{events:?}");
}

#[test]
fn a_first_frame_larger_than_a_few_kib_is_refused_at_once() {
    let server = TestServer::start(ServerConfig::default());
    // A 512 KiB claim was accepted (and allocated) before authentication.
    let cut = trickle_until_cut(
        server.addr,
        512 * 1024,
        Duration::from_millis(100),
        Duration::from_secs(3),
    );
    assert!(cut.is_some(), "a 512 KiB first frame was being read");
    let events = server.events_once(|e| e.contains("exceeds the limit"), Duration::from_secs(2));
    assert!(
        events.iter().any(|e| e.contains("exceeds the limit")),
        "{events:?}"
    );
}
