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
