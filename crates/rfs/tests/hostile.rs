//! Hostile peers: the corpus of tricky inputs, random garbage, mutated
//! requests, clients that vanish in the middle of a write, too many
//! clients. The server must never panic, never write outside its export,
//! never apply a half-received request, and keep serving.

mod common;

use common::{data, options, TestServer};
use osprobe_rfs::protocol::{
    decode_header, decode_reply, decode_request, encode_request, CreateHow, ErrorCode, Handle, Op,
    Reply, Request, COOKIE_LEN, HEADER_LEN, VERSION,
};
use osprobe_rfs::{Client, ServerOptions, Transport, Transports};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A directory with the export and a sibling that must stay untouched.
struct Sandbox {
    top: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let top = tempfile::tempdir().unwrap();
        std::fs::create_dir(top.path().join("export")).unwrap();
        std::fs::create_dir(top.path().join("outside")).unwrap();
        std::fs::write(top.path().join("outside/secret"), b"secret").unwrap();
        std::fs::write(top.path().join("export/file"), b"inside").unwrap();
        std::os::unix::fs::symlink(top.path().join("outside"), top.path().join("export/escape"))
            .unwrap();
        std::os::unix::fs::symlink(
            top.path().join("outside/planted"),
            top.path().join("export/dangling"),
        )
        .unwrap();
        Sandbox { top }
    }

    fn export(&self) -> PathBuf {
        self.top.path().join("export")
    }

    /// Everything outside the export: names and contents.
    fn outside(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut m = BTreeMap::new();
        snapshot(self.top.path(), &self.export(), &mut m);
        m
    }
}

fn snapshot(dir: &Path, skip: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p == skip {
            continue;
        }
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            into.insert(p.clone(), Vec::new());
            snapshot(&p, skip, into);
        } else {
            into.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
        }
    }
}

/// A raw UDP session: the socket, the session id and the root handle.
fn raw_session(server: SocketAddr) -> (UdpSocket, u64, Handle) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut cookie = [0; COOKIE_LEN];
    let mut buf = vec![0u8; 70_000];
    for _ in 0..2 {
        let mut m = Vec::new();
        let hello = Request::Hello {
            nonce: [3; 16],
            cookie,
        };
        encode_request(0, 1, &hello, &mut m).unwrap();
        s.send(&m).unwrap();
        let n = s.recv(&mut buf).unwrap();
        let (h, _, r) = decode_reply(&buf[..n]).unwrap();
        match r {
            Ok(Reply::Retry { cookie: c }) => cookie = c,
            Ok(Reply::Welcome { root, .. }) => return (s, h.session, root),
            other => panic!("{other:?}"),
        }
    }
    panic!("no welcome after the cookie round trip")
}

/// Send and wait briefly for an answer (None: the server stayed silent).
fn exchange(s: &UdpSocket, msg: &[u8]) -> Option<Vec<u8>> {
    s.send(msg).ok()?;
    let mut buf = vec![0u8; 70_000];
    let n = s.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 40, "the corpus is missing");
    v
}

/// Patch a message's session (and, when it has one, its first handle).
fn patched(msg: &[u8], session: u64, root: Option<Handle>) -> Vec<u8> {
    let mut m = msg.to_vec();
    if m.len() >= HEADER_LEN {
        m[8..16].copy_from_slice(&session.to_be_bytes());
    }
    if let Some(root) = root {
        let has_handle = m.len() >= HEADER_LEN + 16 && matches!(m[3], 4..=15);
        if has_handle {
            m[HEADER_LEN..HEADER_LEN + 16].copy_from_slice(&root.0);
        }
    }
    m
}

fn assert_still_serving(addr: SocketAddr, transport: Transport) {
    let mut c = Client::connect(addr, options(transport, 4, 4096)).unwrap();
    let fd = c.open("file", osprobe_rfs::OpenMode::Read).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(c.read(fd, &mut buf).unwrap(), 6);
    assert_eq!(&buf[..6], b"inside");
}

#[test]
fn the_corpus_is_refused_without_panics() {
    let names_that_must_fail = [
        "dotdot",
        "absolute",
        "nul",
        "empty",
        "short",
        "magic",
        "version",
        "reserved",
        "opcode",
        "setuid",
        "bad-how",
        "count",
        "negative",
        "wraps",
        "length",
        "too-many",
        "huge",
        "trailing",
        "half",
        "no-handle",
        "slash",
        "padding",
        "unpadded",
    ];
    for (name, bytes) in corpus() {
        let req = decode_request(&bytes);
        let rep = decode_reply(&bytes);
        if name.starts_with("reply-") {
            assert!(rep.is_err(), "{name} decoded as a reply: {rep:?}");
        } else if names_that_must_fail.iter().any(|k| name.contains(k)) {
            assert!(req.is_err(), "{name} decoded as a request: {req:?}");
        }
    }
}

#[test]
fn the_corpus_leaves_the_server_serving_and_outside_untouched() {
    let sandbox = Sandbox::new();
    let before = sandbox.outside();
    let server = TestServer::start(
        &sandbox.export(),
        Transports::BOTH,
        ServerOptions::default(),
    );
    let (sock, session, root) = raw_session(server.addr);

    // Every corpus file over UDP: as is, with the real session, and with
    // the real session and root handle.
    let mut answered = 0;
    for (_, bytes) in corpus() {
        for m in [
            bytes.clone(),
            patched(&bytes, session, None),
            patched(&bytes, session, Some(root)),
        ] {
            // Wait long for what deserves an answer, briefly for the rest.
            let silent = decode_header(&m).map_or(true, |(h, _)| h.opcode & 0x80 != 0);
            let wait = if silent { 20 } else { 1000 };
            sock.set_read_timeout(Some(Duration::from_millis(wait)))
                .unwrap();
            if let Some(reply) = exchange(&sock, &m) {
                assert!(!silent, "a message without a usable header was answered");
                answered += 1;
                // A reply is always well-formed, and never a success for
                // a message the decoder refuses. An unknown operation is
                // answered UNSUPPORTED under its own code (which this
                // side's decoder does not know either).
                if m[2] != VERSION {
                    // Another version is refused in that version's header.
                    assert_eq!(reply[2], m[2]);
                    assert_eq!(reply[HEADER_LEN], ErrorCode::Protocol as u8);
                    assert!(reply.len() <= m.len(), "a reply larger than the request");
                    continue;
                }
                if Op::from_code(m[3]).is_none() {
                    assert_eq!(reply[3], m[3] | 0x80);
                    assert_eq!(reply[HEADER_LEN], ErrorCode::Unsupported as u8);
                    continue;
                }
                let (_, _, result) = decode_reply(&reply).expect("the server's reply decodes");
                if decode_request(&m).is_err() {
                    assert!(result.is_err(), "{m:?} got {result:?}");
                }
            }
        }
    }
    assert!(answered > 30);

    // Every corpus file over TCP, each on its own connection, framed.
    for (name, bytes) in corpus() {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut frame = (bytes.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&bytes);
        let _ = s.write_all(&frame);
        // Either a reply frame or the connection closes; never a hang.
        let mut len = [0u8; 4];
        match s.read_exact(&mut len) {
            Ok(()) => {
                let n = u32::from_be_bytes(len) as usize;
                let mut body = vec![0u8; n];
                s.read_exact(&mut body).unwrap();
                if body[2] != VERSION {
                    assert_eq!(body[2], bytes[2], "{name}");
                    assert_eq!(body[HEADER_LEN], ErrorCode::Protocol as u8, "{name}");
                } else if let Err(e) = decode_reply(&body) {
                    assert_eq!(
                        body[HEADER_LEN],
                        ErrorCode::Unsupported as u8,
                        "{name}: {e}"
                    );
                }
            }
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "{name}: the server neither answered nor closed"
            ),
        }
    }

    assert_still_serving(server.addr, Transport::Udp);
    assert_eq!(
        sandbox.outside(),
        before,
        "something outside the export changed"
    );
}

#[test]
fn random_garbage_and_mutated_requests_leave_the_server_serving() {
    let sandbox = Sandbox::new();
    let before = sandbox.outside();
    let server = TestServer::start(
        &sandbox.export(),
        Transports::BOTH,
        ServerOptions::default(),
    );
    let (sock, session, root) = raw_session(server.addr);
    // Random datagrams, and random mutations of valid requests, sent in a
    // burst; replies are drained without waiting.
    let mut rng = osprobe_core::random::SplitMix64::new(11);
    let valid: Vec<Vec<u8>> = [
        Request::Lookup {
            dir: root,
            name: b"file",
        },
        Request::Create {
            dir: root,
            name: b"made-here",
            mode: 0o644,
            how: CreateHow::Truncate,
        },
        Request::Readdir {
            dir: root,
            cookie: 0,
            max_entries: 100,
        },
        Request::Getattr { handle: root },
        Request::Remove {
            dir: root,
            name: b"nothing",
        },
    ]
    .iter()
    .enumerate()
    .map(|(i, r)| {
        let mut m = Vec::new();
        encode_request(session, 1000 + i as u64, r, &mut m).unwrap();
        m
    })
    .collect();
    sock.set_nonblocking(true).unwrap();
    let mut buf = vec![0u8; 70_000];
    let mut replies = 0;
    for i in 0..3000u64 {
        let msg = if i % 2 == 0 {
            let mut m = vec![0u8; rng.below(200) as usize];
            rng.fill(&mut m);
            if i % 4 == 0 && m.len() >= 4 {
                m[..4].copy_from_slice(&[b'R', b'F', 1, (rng.below(14)) as u8]);
            }
            m
        } else {
            let mut m = valid[rng.below(valid.len() as u64) as usize].clone();
            m[16..24].copy_from_slice(&(5000 + i).to_be_bytes());
            for _ in 0..=rng.below(3) {
                let at = HEADER_LEN + rng.below((m.len() - HEADER_LEN) as u64) as usize;
                m[at] ^= 1 << rng.below(8);
            }
            m
        };
        let _ = sock.send(&msg);
        if i % 16 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        while let Ok(n) = sock.recv(&mut buf) {
            // Whatever the server says decodes (or is UNSUPPORTED).
            if let Err(e) = decode_reply(&buf[..n]) {
                assert_eq!(buf[HEADER_LEN], ErrorCode::Unsupported as u8, "{e}");
            }
            replies += 1;
        }
    }
    assert!(replies > 100, "{replies}");
    // Random bytes over TCP: the connection is closed, not served.
    for seed in 0..20u64 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut junk = vec![0u8; 1000];
        osprobe_core::random::SplitMix64::new(seed).fill(&mut junk);
        let _ = s.write_all(&junk);
        let mut sink = Vec::new();
        let r = s.read_to_end(&mut sink);
        assert!(
            r.is_ok()
                || !matches!(
                    r.as_ref().unwrap_err().kind(),
                    std::io::ErrorKind::WouldBlock
                ),
            "the server kept a garbage connection open"
        );
    }

    assert_still_serving(server.addr, Transport::Udp);
    assert_still_serving(server.addr, Transport::Tcp);
    assert!(server.server.stats().malformed > 1000);
    assert_eq!(
        sandbox.outside(),
        before,
        "something outside the export changed"
    );
    assert_eq!(
        std::fs::read(sandbox.export().join("file")).unwrap(),
        b"inside"
    );
}

#[test]
fn hostile_names_never_reach_outside() {
    let sandbox = Sandbox::new();
    let before = sandbox.outside();
    let server = TestServer::start(&sandbox.export(), Transports::UDP, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Udp, 4, 4096)).unwrap();
    let src = sandbox.top.path().join("outside/secret");
    let e = c
        .open("escape/secret", osprobe_rfs::OpenMode::Read)
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Access), "{e}");
    for target in [
        "../outside/x",
        "/../outside/x",
        "escape/x",
        "escape/secret",
        "dangling",
        "escape",
    ] {
        assert!(c.put(&src, target, &mut |_| {}).is_err(), "{target}");
        assert!(c.stat(target).is_err(), "{target}");
        // Removing a link inside the export removes the link itself.
        let is_link = target == "dangling" || target == "escape";
        assert!(c.remove(target).is_err() || is_link, "{target}");
    }
    // An absolute path names a path inside the export, nothing else.
    let e = c.stat("/etc/passwd").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NoEnt), "{e}");
    assert_eq!(sandbox.outside(), before);
    assert!(!sandbox.top.path().join("outside/planted").exists());
}

#[test]
fn a_tcp_client_that_vanishes_mid_write_changes_nothing() {
    let sandbox = Sandbox::new();
    let server = TestServer::start(&sandbox.export(), Transports::TCP, ServerOptions::default());
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let frame = |xid: u64, session: u64, req: &Request<'_>| {
        let mut m = vec![0u8; 4];
        encode_request(session, xid, req, &mut m).unwrap();
        let len = (m.len() - 4) as u32;
        m[..4].copy_from_slice(&len.to_be_bytes());
        m
    };
    let recv = |s: &mut TcpStream| {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).unwrap();
        body
    };
    let m = frame(
        1,
        0,
        &Request::Hello {
            nonce: [5; 16],
            cookie: [0; COOKIE_LEN],
        },
    );
    s.write_all(&m).unwrap();
    let body = recv(&mut s);
    let (h, _, r) = decode_reply(&body).unwrap();
    let Ok(Reply::Welcome { root, .. }) = r else {
        panic!()
    };
    let session = h.session;
    let m = frame(
        2,
        session,
        &Request::Lookup {
            dir: root,
            name: b"file",
        },
    );
    s.write_all(&m).unwrap();
    let body = recv(&mut s);
    let Ok(Reply::Handle { handle, .. }) = decode_reply(&body).unwrap().2 else {
        panic!()
    };
    // A 40 KB write of which only 1 KB arrives before the client is gone.
    let payload = data(40_000, 1);
    let m = frame(
        3,
        session,
        &Request::Write {
            file: handle,
            offset: 0,
            data: &payload,
        },
    );
    s.write_all(&m[..1024]).unwrap();
    drop(s);
    let t = Instant::now();
    while server.server.stats().sessions_open > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the session outlived its connection"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        std::fs::read(sandbox.export().join("file")).unwrap(),
        b"inside"
    );
    assert_still_serving(server.addr, Transport::Tcp);
}

#[test]
fn a_udp_client_that_vanishes_mid_put_is_forgotten_and_acknowledged_bytes_stay() {
    let sandbox = Sandbox::new();
    let server = TestServer::start(
        &sandbox.export(),
        Transports::UDP,
        ServerOptions {
            session_idle: Duration::from_millis(300),
            ..Default::default()
        },
    );
    let (sock, session, root) = raw_session(server.addr);
    let mut m = Vec::new();
    encode_request(
        session,
        2,
        &Request::Create {
            dir: root,
            name: b"partial",
            mode: 0o644,
            how: CreateHow::Exclusive,
        },
        &mut m,
    )
    .unwrap();
    let reply = exchange(&sock, &m).unwrap();
    let Ok(Reply::Handle { handle, .. }) = decode_reply(&reply).unwrap().2 else {
        panic!()
    };
    let payload = data(3 * 4096, 2);
    for (i, chunk) in payload.chunks(4096).enumerate() {
        let mut m = Vec::new();
        encode_request(
            session,
            3 + i as u64,
            &Request::Write {
                file: handle,
                offset: (i * 4096) as u64,
                data: chunk,
            },
            &mut m,
        )
        .unwrap();
        let reply = exchange(&sock, &m).unwrap();
        assert!(decode_reply(&reply).unwrap().2.is_ok());
    }
    drop(sock); // gone, without a goodbye
    let t = Instant::now();
    while server.server.stats().sessions_open > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "an idle session was never forgotten"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // What the server acknowledged is on disk.
    assert_eq!(
        std::fs::read(sandbox.export().join("partial")).unwrap(),
        payload
    );
    assert_still_serving(server.addr, Transport::Udp);
}

#[test]
fn too_many_clients_are_refused_until_one_leaves() {
    let sandbox = Sandbox::new();
    let server = TestServer::start(
        &sandbox.export(),
        Transports::BOTH,
        ServerOptions {
            max_clients: 2,
            ..Default::default()
        },
    );
    let a = Client::connect(server.addr, options(Transport::Udp, 1, 1024)).unwrap();
    let _b = Client::connect(server.addr, options(Transport::Tcp, 1, 1024)).unwrap();
    for transport in [Transport::Udp, Transport::Tcp] {
        let e = Client::connect(server.addr, options(transport, 1, 1024))
            .err()
            .unwrap();
        assert_eq!(e.code(), Some(ErrorCode::Busy), "{e}");
        assert!(e.to_string().contains("at most 2 clients"), "{e}");
    }
    a.disconnect().unwrap();
    Client::connect(server.addr, options(Transport::Udp, 1, 1024)).unwrap();
}
