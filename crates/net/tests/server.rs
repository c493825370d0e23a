//! The server against well-behaved, broken and hostile clients, over
//! loopback (127.0.0.1 only).

use osprobe_net::client::NetError;
use osprobe_net::protocol::{self, ErrorCode, Message, TestSpec};
mod common;

use common::TestServer;
use osprobe_net::server::ServerConfig;
use osprobe_net::sock::ConnectOptions;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn quick_config() -> ServerConfig {
    ServerConfig {
        handshake_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    }
}

/// A TCP echo round trip through a fresh session: the server still works.
fn echo_works(server: &TestServer) {
    let session = server
        .peer(None)
        .open(
            TestSpec::Echo {
                streams: 1,
                size: 32,
            },
            Duration::from_secs(1),
        )
        .unwrap();
    let mut stream = session.attach(0, &ConnectOptions::default()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let msg = [7u8; 32];
    let mut reply = [0u8; 32];
    stream.write_all(&msg).unwrap();
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(msg, reply);
    stream.shutdown(Shutdown::Write).unwrap();
    let reports = session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].bytes, 32);
    assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
}

fn raw_connect(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Hello { .. } => s,
        other => panic!("expected hello, got {other:?}"),
    }
}

#[test]
fn echo_sink_and_report() {
    let server = TestServer::start(quick_config());
    echo_works(&server);
    let session = server
        .peer(None)
        .open(
            TestSpec::Sink {
                streams: 2,
                read_size: 65536,
                cpu: None,
            },
            Duration::from_secs(5),
        )
        .unwrap();
    let streams: Vec<TcpStream> = (0..2)
        .map(|i| session.attach(i, &ConnectOptions::default()).unwrap())
        .collect();
    for (i, mut s) in streams.iter().enumerate() {
        s.write_all(&vec![1u8; 100_000 * (i + 1)]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
    }
    let reports = session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    assert_eq!(reports[0].bytes, 100_000);
    assert_eq!(reports[1].bytes, 200_000);
    assert!(reports[1].tcp_info.is_some());
}

#[test]
fn garbage_truncated_and_idle_clients_do_not_hurt_the_server() {
    let server = TestServer::start(quick_config());
    // Garbage: a length prefix announcing a huge frame, then noise.
    let mut s = raw_connect(server.addr);
    s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
    match protocol::read_message(&mut s) {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::Protocol);
            assert!(message.contains("exceeds"), "{message}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // Valid length, invalid JSON.
    let mut s = raw_connect(server.addr);
    s.write_all(&5u32.to_be_bytes()).unwrap();
    s.write_all(b"{{{{{").unwrap();
    assert!(matches!(
        protocol::read_message(&mut s),
        Ok(Message::Error { .. })
    ));
    // Stops in the middle of a message, then closes.
    let mut s = raw_connect(server.addr);
    s.write_all(&100u32.to_be_bytes()).unwrap();
    s.write_all(b"{\"type\":").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert!(matches!(
        protocol::read_message(&mut s),
        Ok(Message::Error { .. }) | Err(_)
    ));
    // Connects and idles: cut off after the handshake timeout.
    let mut idle = raw_connect(server.addr);
    let started = Instant::now();
    match protocol::read_message(&mut idle) {
        Ok(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Timeout),
        other => panic!("expected a timeout error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4));
    // Binary noise without a prefix that makes sense.
    for seed in 0..20u8 {
        let mut s = raw_connect(server.addr);
        let noise: Vec<u8> = (0..64)
            .map(|i| seed.wrapping_mul(31).wrapping_add(i))
            .collect();
        let _ = s.write_all(&noise);
    }
    echo_works(&server);
}

#[test]
fn wrong_messages_at_the_wrong_time_are_refused() {
    let server = TestServer::start(quick_config());
    let mut s = raw_connect(server.addr);
    protocol::write_message(&mut s, &Message::Finish { hashes: vec![] }).unwrap();
    match protocol::read_message(&mut s).unwrap() {
        Message::Error { code, message } => {
            assert_eq!(code, ErrorCode::Protocol);
            assert!(message.contains("expected open, attach"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Attach to a session that does not exist.
    let mut s = raw_connect(server.addr);
    let attach = Message::Attach {
        session: "00".repeat(16),
        stream: 0,
        proof: None,
    };
    protocol::write_message(&mut s, &attach).unwrap();
    assert!(matches!(
        protocol::read_message(&mut s).unwrap(),
        Message::Error {
            code: ErrorCode::Session,
            ..
        }
    ));
    echo_works(&server);
}

#[test]
fn a_stream_cannot_be_attached_twice_or_out_of_range() {
    let server = TestServer::start(quick_config());
    let session = server
        .peer(None)
        .open(
            TestSpec::Sink {
                streams: 1,
                read_size: 1024,
                cpu: None,
            },
            Duration::from_secs(5),
        )
        .unwrap();
    let first = session.attach(0, &ConnectOptions::default()).unwrap();
    let again = session.attach(0, &ConnectOptions::default()).unwrap_err();
    assert!(again.to_string().contains("already attached"), "{again}");
    let beyond = session.attach(1, &ConnectOptions::default()).unwrap_err();
    assert!(beyond.to_string().contains("does not exist"), "{beyond}");
    first.shutdown(Shutdown::Write).unwrap();
    session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
}

#[test]
fn the_token_is_required_and_checked() {
    let server = TestServer::start(ServerConfig {
        token: Some("correct horse".into()),
        ..quick_config()
    });
    let spec = || TestSpec::Echo {
        streams: 1,
        size: 32,
    };
    match server.peer(None).open(spec(), Duration::from_secs(5)) {
        Err(NetError::TokenRequired { .. }) => {}
        other => panic!("expected TokenRequired, got {:?}", other.err()),
    }
    match server
        .peer(Some("battery staple"))
        .open(spec(), Duration::from_secs(5))
    {
        Err(NetError::Refused {
            code: ErrorCode::Auth,
            message,
            ..
        }) => {
            assert!(message.contains("wrong token"), "{message}")
        }
        other => panic!("expected an auth refusal, got {:?}", other.err()),
    }
    let session = server
        .peer(Some("correct horse"))
        .open(spec(), Duration::from_secs(5))
        .unwrap();
    let stream = session.attach(0, &ConnectOptions::default()).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
    assert!(server.events().iter().any(|e| e.contains("wrong token")));
}

#[test]
fn limits_are_enforced_and_the_server_keeps_serving() {
    let server = TestServer::start(ServerConfig {
        max_clients: 1,
        max_duration: Duration::from_secs(2),
        ..quick_config()
    });
    let too_long = server
        .peer(None)
        .open(
            TestSpec::Echo {
                streams: 1,
                size: 32,
            },
            Duration::from_secs(60),
        )
        .err()
        .unwrap();
    assert!(too_long.to_string().contains("at most 2 s"), "{too_long}");
    let first = server
        .peer(None)
        .open(
            TestSpec::Echo {
                streams: 1,
                size: 32,
            },
            Duration::from_secs(1),
        )
        .unwrap();
    let second = server
        .peer(None)
        .open(
            TestSpec::Echo {
                streams: 1,
                size: 32,
            },
            Duration::from_secs(1),
        )
        .err()
        .unwrap();
    assert!(second.to_string().contains("--max-clients"), "{second}");
    // The first session overruns: the server ends it and reports why.
    let started = Instant::now();
    let stream = first.attach(0, &ConnectOptions::default()).unwrap();
    let mut buf = [0u8; 1];
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let n = (&stream).read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server should close the overrunning stream");
    assert!(started.elapsed() < Duration::from_secs(12));
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    echo_works(&server);
}

#[test]
fn a_client_vanishing_mid_test_is_survived() {
    let server = TestServer::start(quick_config());
    {
        let session = server
            .peer(None)
            .open(
                TestSpec::Sink {
                    streams: 1,
                    read_size: 4096,
                    cpu: None,
                },
                Duration::from_secs(5),
            )
            .unwrap();
        let mut stream = session.attach(0, &ConnectOptions::default()).unwrap();
        stream.write_all(&[0u8; 10_000]).unwrap();
        // Both connections dropped without finishing.
    }
    std::thread::sleep(Duration::from_millis(300));
    echo_works(&server);
    assert!(
        server
            .events()
            .iter()
            .any(|e| e.contains("before finishing")),
        "{:?}",
        server.events()
    );
}

#[test]
fn udp_echo_answers_only_open_sessions() {
    let server = TestServer::start(quick_config());
    let session = server
        .peer(None)
        .open(
            TestSpec::Echo {
                streams: 1,
                size: 32,
            },
            Duration::from_secs(5),
        )
        .unwrap();
    let (socket, id) = session.udp_echo().unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut datagram = id.to_vec();
    datagram.extend_from_slice(&[9u8; 16]);
    socket.send(&datagram).unwrap();
    let mut reply = [0u8; 64];
    let n = socket.recv(&mut reply).unwrap();
    assert_eq!(&reply[..n], &datagram[..]);
    // A datagram with a wrong session id is ignored.
    let mut wrong = datagram.clone();
    wrong[0] ^= 0xff;
    socket.send(&wrong).unwrap();
    assert!(socket.recv(&mut reply).is_err());
    let stream = session.attach(0, &ConnectOptions::default()).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    session.finish(Vec::new(), Duration::from_secs(5)).unwrap();
}
