//! The server on a hostile network: forged UDP sources, clients without
//! the token, token guessers, silent TCP connections, long hashes, and
//! servers that send terminal escapes. Loopback only; every server and
//! socket is dropped at the end of its test.

mod common;

use common::{options, TestServer};
use osprobe_rfs::protocol::{
    decode_reply, encode_error_reply_as, encode_request, ErrorCode, Handle, Reply, Request,
    COOKIE_LEN, HEADER_LEN, HELLO_LEN,
};
use osprobe_rfs::{Client, ClientError, ServerOptions, Transport, Transports};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn udp_socket(server: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s
}

/// Send one datagram; the reply, if one comes within the socket's timeout.
fn exchange(s: &UdpSocket, msg: &[u8]) -> Option<Vec<u8>> {
    s.send(msg).unwrap();
    let mut buf = vec![0u8; 70_000];
    let n = s.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn hello(nonce: [u8; 16], cookie: [u8; COOKIE_LEN]) -> Vec<u8> {
    let mut m = Vec::new();
    encode_request(0, 1, &Request::Hello { nonce, cookie }, &mut m).unwrap();
    m
}

/// A raw UDP session that never authenticates: (socket, session, root).
fn raw_session(server: SocketAddr, nonce: u8) -> (UdpSocket, u64, Handle) {
    let s = udp_socket(server);
    let first = exchange(&s, &hello([nonce; 16], [0; COOKIE_LEN])).expect("a retry");
    let Ok(Reply::Retry { cookie }) = decode_reply(&first).unwrap().2 else {
        panic!("no retry")
    };
    let second = exchange(&s, &hello([nonce; 16], cookie)).expect("a welcome");
    let (h, _, r) = decode_reply(&second).unwrap();
    let Ok(Reply::Welcome { root, .. }) = r else {
        panic!("{r:?}")
    };
    (s, h.session, root)
}

#[test]
fn an_unvalidated_udp_source_gets_no_reply_larger_than_its_request_and_no_session() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let s = udp_socket(server.addr);

    // A hello from an address the server has not seen: a cookie, nothing
    // else; no session, no state.
    let m = hello([1; 16], [0; COOKIE_LEN]);
    assert_eq!(m.len(), HELLO_LEN);
    let reply = exchange(&s, &m).expect("a retry");
    assert!(reply.len() <= m.len(), "{} > {}", reply.len(), m.len());
    assert!(matches!(
        decode_reply(&reply).unwrap().2,
        Ok(Reply::Retry { .. })
    ));
    // A cookie made up, or one for another address, does not open one.
    let forged = exchange(&s, &hello([1; 16], [7; COOKIE_LEN])).expect("a retry");
    assert!(matches!(
        decode_reply(&forged).unwrap().2,
        Ok(Reply::Retry { .. })
    ));
    assert_eq!(server.server.stats().sessions_opened, 0);
    assert_eq!(server.server.stats().sessions_open, 0);

    // Requests naming sessions that do not exist, an old client's hello,
    // unknown operations: whatever comes back is not larger than what was
    // sent.
    let mut small = Vec::new();
    let mut m = Vec::new();
    encode_request(
        0xdead_beef,
        9,
        &Request::Getattr {
            handle: Handle([0; 16]),
        },
        &mut m,
    )
    .unwrap();
    small.push(m);
    let mut old_hello = b"RF\x01\x01".to_vec();
    old_hello.extend_from_slice(&[0; 20]);
    old_hello.extend_from_slice(&[5; 16]);
    small.push(old_hello.clone());
    let mut unknown_op = small[0].clone();
    unknown_op[3] = 0x7e;
    small.push(unknown_op);
    let mut bare = small[0][..HEADER_LEN].to_vec();
    bare[3] = 8;
    small.push(bare);
    for m in &small {
        if let Some(r) = exchange(&s, m) {
            assert!(
                r.len() <= m.len(),
                "{} bytes answered with {}",
                m.len(),
                r.len()
            );
        }
    }
    // The old client still learns why, in its own version's header.
    let r = exchange(&s, &old_hello).expect("an error for the old client");
    assert_eq!(r[2], 1);
    assert_eq!(r[HEADER_LEN], ErrorCode::Protocol as u8);
    let detail = String::from_utf8_lossy(&r[HEADER_LEN + 3..]).into_owned();
    assert!(detail.contains("v2"), "{detail}");
    assert_eq!(server.server.stats().sessions_opened, 0);

    // The round trip done, a session opens and the client is served.
    let (_s, session, _) = raw_session(server.addr, 2);
    assert_ne!(session, 0);
    assert_eq!(server.server.stats().sessions_opened, 1);
    let mut c = Client::connect(server.addr, options(Transport::Udp, 2, 1024)).unwrap();
    c.stat("/").unwrap();
}

#[test]
fn clients_without_the_token_cannot_hold_every_slot() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::UDP,
        ServerOptions {
            token: Some("s3cret".into()),
            max_clients: 2,
            ..Default::default()
        },
    );
    // Two sessions that never authenticate but keep sending requests
    // (each refused with AUTH).
    let squatters: Vec<_> = (0..2).map(|i| raw_session(server.addr, 10 + i)).collect();
    let keep_busy = |squatters: &[(UdpSocket, u64, Handle)]| {
        for (s, session, root) in squatters {
            let mut m = Vec::new();
            encode_request(*session, 5, &Request::Getattr { handle: *root }, &mut m).unwrap();
            let r = exchange(s, &m).expect("a refusal");
            assert_eq!(
                decode_reply(&r).unwrap().2.unwrap_err().code,
                ErrorCode::Auth
            );
        }
    };
    let mut right = options(Transport::Udp, 1, 1024);
    right.token = Some("s3cret".into());
    // Sessions that never prove the token wait in a pool of their own, not
    // in the clients' slots: a client with the token gets a slot at once,
    // however much they send (before, it was told BUSY until their grace
    // ran out).
    keep_busy(&squatters);
    let mut c = Client::connect(server.addr, right.clone()).unwrap();
    c.stat("/").unwrap();
    keep_busy(&squatters);
    let mut second = Client::connect(server.addr, right).unwrap();
    second.stat("/").unwrap();
}

#[test]
fn wrong_tokens_back_off() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::BOTH,
        ServerOptions {
            token: Some("s3cret".into()),
            ..Default::default()
        },
    );
    let mut wrong = options(Transport::Udp, 1, 1024);
    wrong.token = Some("guess".into());
    // Too impatient to wait out a back-off: each refusal is seen.
    wrong.timeout = Duration::from_millis(100);
    let mut verdicts = 0;
    let mut waits = 0;
    // (Over UDP, where the timeout bounds only the back-off waited out,
    // not the wait for a reply.)
    for _ in 0..20 {
        let e = Client::connect(server.addr, wrong.clone()).err().unwrap();
        assert_eq!(e.code(), Some(ErrorCode::Auth), "{e}");
        if e.to_string().contains("wrong token:") {
            verdicts += 1;
        } else {
            assert!(e.to_string().contains("wait"), "{e}");
            waits += 1;
        }
    }
    // Twenty tries in a row: the proofs of only the first few are checked
    // (without back-off, all twenty).
    assert!(verdicts <= 5, "{verdicts} proofs checked");
    assert!(waits >= 15, "{waits}");
    // The owner of the token, sharing the guesser's address, is not locked
    // out: its client waits out the back-off and gets in.
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut right = options(transport, 1, 1024);
        right.token = Some("s3cret".into());
        let mut c = Client::connect(server.addr, right).unwrap();
        c.stat("/").unwrap();
        // The guesser is back at its first free try after that success,
        // and backed off again at once.
        for _ in 0..3 {
            let _ = Client::connect(server.addr, wrong.clone());
        }
    }
}

#[test]
fn a_hostile_servers_text_is_escaped_on_the_client() {
    // A "server" that answers the first hello with an error whose detail
    // tries to clear the screen and forge a line.
    let e = refused_by_fake_server(
        osprobe_rfs::protocol::VERSION,
        ErrorCode::Io,
        "\x1b[2J\x1b[Hdone\nosprobe: all good\u{202e}",
    );
    assert!(matches!(e, ClientError::Remote { .. }), "{e}");
    let text = e.to_string();
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(!text.contains('\n'), "{text:?}");
    assert!(!text.contains('\u{202e}'), "{text:?}");
    assert!(text.contains("done"), "{text:?}");
}

#[test]
fn silent_tcp_connections_do_not_lock_out_a_client_and_the_excess_hears_busy() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::TCP,
        ServerOptions {
            max_clients: 2,
            max_pending: 8,
            max_pending_per_source: 4,
            hello_timeout: Duration::from_secs(3),
            ..Default::default()
        },
    );
    // Silent connections from another address, more than the pool holds,
    // and from the clients' own address, more than a source may hold.
    let silent: Vec<TcpStream> = (0..12)
        .map(|i| {
            let from = if i % 2 == 0 { "127.0.0.2" } else { "127.0.0.1" };
            connect_from(from, server.addr)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // Clients get in at the first try, well within the hello timeout that
    // would otherwise free the slots (the old server answered BUSY here
    // until the silent ones timed out).
    let mut a = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    let mut b = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    a.stat("/").unwrap();
    b.stat("/").unwrap();
    // A client beyond max_clients sessions is told why it is turned away.
    let e = Client::connect(server.addr, options(Transport::Tcp, 1, 1024))
        .err()
        .unwrap();
    assert_eq!(e.code(), Some(ErrorCode::Busy), "{e}");
    assert!(e.to_string().contains("at most 2 clients"), "{e}");
    // Those evicted were closed at once; the rest within the hello timeout.
    let until = Instant::now() + Duration::from_secs(10);
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        loop {
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => panic!("a silent connection was sent data"),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(Instant::now() < until, "a silent connection is still open");
                }
                Err(_) => break,
            }
        }
    }
}

/// A TCP connection to `to` (IPv4) from the loopback address `from`.
fn connect_from(from: &str, to: std::net::SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let std::net::SocketAddr::V4(to) = to else {
        panic!("IPv4 only: {to}")
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let local = sockaddr(from.parse().unwrap(), 0);
    let remote = sockaddr(*to.ip(), to.port());
    // SAFETY: a fresh socket owned by the TcpStream at once; the addresses
    // are valid sockaddr_in values of the length given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let bound = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(bound, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let connected = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(connected, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

#[test]
fn a_getattr_is_answered_while_a_large_hash_runs() {
    let export = tempfile::tempdir().unwrap();
    // Sparse: no disk space, but every byte is read and hashed.
    let big = std::fs::File::create(export.path().join("big")).unwrap();
    big.set_len(1 << 30).unwrap();
    drop(big);
    let server = TestServer::start(
        export.path(),
        Transports::UDP,
        ServerOptions {
            udp_workers: 1,
            ..Default::default()
        },
    );
    let addr = server.addr;
    let mut other = Client::connect(addr, options(Transport::Udp, 1, 1024)).unwrap();
    let mut hasher = Client::connect(addr, options(Transport::Udp, 1, 1024)).unwrap();
    let hashing = std::thread::spawn(move || {
        let r = hasher.remote_hash("big");
        (r, Instant::now())
    });
    // Once the hash has begun (about 2 s of reading and hashing in a test
    // build), another client is served on the one request worker.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(other.stat("big").unwrap().size, 1 << 30);
    let served = Instant::now();
    let (hash, hashed) = hashing.join().unwrap();
    assert_eq!(hash.unwrap().0, 1 << 30);
    assert!(served < hashed, "the getattr waited for the hash to finish");
}

#[test]
fn hashes_and_writes_are_bounded() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("small"), b"0123456789").unwrap();
    let big = std::fs::File::create(export.path().join("big")).unwrap();
    big.set_len(1 << 20).unwrap();
    drop(big);
    let server = TestServer::start(
        export.path(),
        Transports::BOTH,
        ServerOptions {
            max_file_size: 1 << 20,
            max_hash_bytes: 1000,
            ..Default::default()
        },
    );
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut c = Client::connect(server.addr, options(transport, 2, 1024)).unwrap();
        assert_eq!(c.remote_hash("small").unwrap().0, 10);
        let e = c.remote_hash("big").unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::TooBig), "{e}");
        assert!(e.to_string().contains("1000 bytes at most"), "{e}");
        // A write far beyond the limit is refused and creates nothing big.
        let fd = c
            .create("sparse", osprobe_rfs::CreateHow::Truncate, 0o644)
            .unwrap();
        let e = c.write_at(fd, 1 << 40, b"x").unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::TooBig), "{e}");
        assert!(e.to_string().contains("file size limit"), "{e}");
        c.write_at(fd, (1 << 20) - 1, b"x").unwrap();
        assert_eq!(
            std::fs::metadata(export.path().join("sparse"))
                .unwrap()
                .len(),
            1 << 20
        );
    }
}

#[test]
fn a_large_first_frame_closes_the_connection() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), Transports::TCP, ServerOptions::default());
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    // A 60 KB frame announced before any hello: closed at once, not
    // buffered up to the hello timeout.
    s.write_all(&60_000u32.to_be_bytes()).unwrap();
    s.write_all(b"RF").unwrap();
    let mut buf = [0u8; 64];
    let t = Instant::now();
    let closed = match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    assert!(closed, "the connection stayed open for {:?}", t.elapsed());
    // A client is still served.
    let mut c = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    c.stat("/").unwrap();
}

#[test]
fn a_new_client_displaces_a_silent_connection_when_the_slots_are_full() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::TCP,
        ServerOptions {
            max_clients: 2,
            max_pending: 4,
            max_pending_per_source: 4,
            ..Default::default()
        },
    );
    // A served client keeps its slot throughout.
    let mut served = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    // More silent connections than the pending pool holds, from the
    // clients' own address.
    let silent: Vec<TcpStream> = (0..5)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // Well within the 5 s hello timeout, a new client takes the place of
    // the oldest silent connection at once.
    let mut c = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    c.stat("/").unwrap();
    served.stat("/").unwrap();
    drop(silent);
}

#[test]
fn a_server_of_another_version_is_named_as_such() {
    // An old (version 1) server refuses our hello in its own header.
    let e = refused_by_fake_server(
        1,
        ErrorCode::Protocol,
        "protocol version 2 is not supported (this side speaks version 1)",
    );
    assert!(matches!(e, ClientError::Version { theirs: 1, .. }), "{e}");
    assert!(e.to_string().contains("version 1"), "{e}");
}

/// Connect over UDP to a fake server that answers the first hello with
/// `code` and `detail` in a header of protocol `version`; the client's error.
fn refused_by_fake_server(version: u8, code: ErrorCode, detail: &'static str) -> ClientError {
    let fake = UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let addr = fake.local_addr().unwrap();
    let answer = std::thread::spawn(move || {
        let mut buf = vec![0u8; 70_000];
        let Ok((_, from)) = fake.recv_from(&mut buf) else {
            return;
        };
        let xid = u64::from_be_bytes(buf[16..24].try_into().unwrap());
        let e = osprobe_rfs::protocol::RemoteError::new(code, detail);
        let mut out = Vec::new();
        encode_error_reply_as(version, 0, xid, 1, &e, &mut out);
        let _ = fake.send_to(&out, from);
    });
    let e = Client::connect(addr, options(Transport::Udp, 1, 1024))
        .err()
        .unwrap();
    answer.join().unwrap();
    e
}
