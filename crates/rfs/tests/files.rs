//! File semantics on the server: what reads open, what writes refuse,
//! and what an interrupted put leaves behind.

mod common;

use common::{data, options, TestServer};
use osprobe_rfs::protocol::{
    decode_header, decode_reply, encode_error_reply, encode_reply, encode_request, Handle, Op,
    RemoteError, Reply, Request, COOKIE_LEN,
};
use osprobe_rfs::{
    Client, ClientError, CreateHow, ErrorCode, OpenMode, ServerOptions, Transport, Transports,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A child process killed and reaped when dropped, even if the test fails.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_running_binary_in_the_export_can_be_read() {
    let export = tempfile::tempdir().unwrap();
    let binary = export.path().join("sleeper");
    let Some(sleep) = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        println!("skipped: no sleep binary to run from the export");
        return;
    };
    std::fs::copy(sleep, &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let running = match Command::new(&binary).arg("30").spawn() {
        Ok(child) => Running(child),
        Err(e) => {
            println!("skipped: cannot run a binary from the temporary directory: {e}");
            return;
        }
    };
    let expected = std::fs::read(&binary).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Tcp, 4, 4096)).unwrap();
    // A read opens the file read-only: no "Text file busy".
    let fd = c.open("sleeper", OpenMode::Read).unwrap();
    let mut head = [0u8; 4];
    assert_eq!(c.read(fd, &mut head).unwrap(), 4);
    assert_eq!(&head, b"\x7fELF");
    let (size, _) = c.remote_hash("sleeper").unwrap();
    assert_eq!(size, expected.len() as u64);
    drop(running);
}

#[test]
fn a_hard_link_to_a_file_outside_the_export_is_not_written_through() {
    let outside = tempfile::tempdir().unwrap();
    let export = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    if let Err(e) = std::fs::hard_link(&victim, export.path().join("link")) {
        println!("skipped: cannot make a hard link between temporary directories: {e}");
        return;
    }
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Udp, 4, 4096)).unwrap();

    // Reading through it is allowed.
    let fd = c.open("link", OpenMode::Read).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(c.read(fd, &mut buf).unwrap(), 8);

    // Writing, and truncating by create, are refused with the reason.
    let fd = c.open("link", OpenMode::ReadWrite).unwrap();
    let e = c.write(fd, b"overwritten").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Access), "{e}");
    assert!(e.to_string().contains("hard link"), "{e}");
    let e = c.create("link", CreateHow::Truncate, 0o644).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Access), "{e}");
    assert!(e.to_string().contains("hard link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    // A put replaces the name in the export, not the file behind it.
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("new"), b"replacement").unwrap();
    c.put(&local.path().join("new"), "link", &mut |_| {})
        .unwrap();
    assert_eq!(
        std::fs::read(export.path().join("link")).unwrap(),
        b"replacement"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    // An ordinary file is still written.
    let fd = c.create("plain", CreateHow::Truncate, 0o644).unwrap();
    assert_eq!(c.write(fd, &data(100, 1)).unwrap(), 100);
    let fd = c.create("plain", CreateHow::Truncate, 0o644).unwrap();
    assert_eq!(c.fstat(fd).unwrap().size, 0);
}

/// Names in `dir` left by uploads (`.NAME.osprobe-put-RANDOM`).
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".osprobe-put-"))
        .collect()
}

/// Wait (up to 10 s, polling) until `dir` holds no upload temporary.
fn no_temporaries_within(dir: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = temporaries(dir);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_put_replaces_the_file_in_one_step_and_leaves_nothing_behind() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("doc"), b"old version").unwrap();
    let new = data(300_000, 7);
    std::fs::write(local.path().join("doc"), &new).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut c = Client::connect(server.addr, options(transport, 8, 8192)).unwrap();
        let before = std::fs::read(export.path().join("doc")).unwrap();
        let mut seen_temporary = false;
        c.put(&local.path().join("doc"), "doc", &mut |_| {
            // While the upload runs, the old file is still there, whole.
            if !seen_temporary {
                assert_eq!(std::fs::read(export.path().join("doc")).unwrap(), before);
                seen_temporary = !temporaries(export.path()).is_empty();
            }
        })
        .unwrap();
        assert!(seen_temporary, "the upload went to a temporary file");
        // A scratch file (an upload never committed) is read, written and
        // stat'ed like a file, and goes when discarded.
        let fd = c.create_scratch("doc").unwrap();
        assert_eq!(c.write_at(fd, 5000, b"scratch").unwrap(), 7);
        assert_eq!(c.fstat(fd).unwrap().size, 5007);
        let mut back = [0u8; 7];
        assert_eq!(c.read_at(fd, 5000, &mut back).unwrap(), 7);
        assert_eq!(&back, b"scratch");
        assert_eq!(temporaries(export.path()).len(), 1);
        c.discard(fd).unwrap();
        assert_eq!(std::fs::read(export.path().join("doc")).unwrap(), new);
        assert_eq!(std::fs::read(export.path().join("doc")).unwrap(), new);
        assert_eq!(temporaries(export.path()), Vec::<String>::new());
    }
}

#[test]
fn an_interrupted_put_keeps_the_old_file() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("doc"), b"old version").unwrap();
    std::fs::write(local.path().join("doc"), data(2_000_000, 8)).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Udp, 4, 4096)).unwrap();
    c.set_stop(&STOP);
    let e = c
        .put(&local.path().join("doc"), "doc", &mut |p| {
            if p.done > 100_000 {
                STOP.store(true, Ordering::Relaxed);
            }
        })
        .unwrap_err();
    assert!(matches!(e, ClientError::Interrupted { .. }), "{e}");
    assert!(e.to_string().contains("unchanged"), "{e}");
    assert_eq!(
        std::fs::read(export.path().join("doc")).unwrap(),
        b"old version"
    );
    assert_eq!(temporaries(export.path()), Vec::<String>::new());
}

/// A raw session over TCP: hello, then one request at a time.
struct RawTcp {
    stream: TcpStream,
    session: u64,
    root: Handle,
    xid: u64,
}

impl RawTcp {
    fn connect(addr: SocketAddr) -> RawTcp {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut raw = RawTcp {
            stream,
            session: 0,
            root: Handle([0; 16]),
            xid: 0,
        };
        let (session, reply) = raw.call(&Request::Hello {
            nonce: [9; 16],
            cookie: [0; COOKIE_LEN],
        });
        let Ok(Reply::Welcome { root, .. }) = reply else {
            panic!("{reply:?}")
        };
        raw.session = session;
        raw.root = root;
        raw
    }

    fn call(&mut self, req: &Request<'_>) -> (u64, Result<Reply<'static>, RemoteError>) {
        self.xid += 1;
        let mut m = Vec::new();
        encode_request(self.session, self.xid, req, &mut m).unwrap();
        self.stream
            .write_all(&(m.len() as u32).to_be_bytes())
            .unwrap();
        self.stream.write_all(&m).unwrap();
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).unwrap();
        let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut buf).unwrap();
        let (h, _, r) = decode_reply(&buf).unwrap();
        let r = r.map(owned);
        (h.session, r)
    }
}

#[test]
fn a_put_cut_off_midway_keeps_the_old_file_and_its_temporary_goes() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("doc"), b"old version").unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    // As a killed client would: begin, write half, and vanish (the kernel
    // closes the connection).
    let mut raw = RawTcp::connect(server.addr);
    let (_, r) = raw.call(&Request::PutBegin {
        dir: raw.root,
        name: b"doc",
        mode: 0o644,
        size: 0,
    });
    let Ok(Reply::Handle { handle: upload, .. }) = r else {
        panic!("{r:?}")
    };
    let (_, r) = raw.call(&Request::Write {
        file: upload,
        offset: 0,
        data: &data(30_000, 3),
    });
    assert!(
        matches!(r, Ok(Reply::Written { count: 30_000, .. })),
        "{r:?}"
    );
    assert_eq!(temporaries(export.path()).len(), 1, "the upload is midway");
    // Another session cannot use the upload.
    let mut other = RawTcp::connect(server.addr);
    let (_, r) = other.call(&Request::PutCommit { upload });
    assert_eq!(r.unwrap_err().code, ErrorCode::Access);
    drop(raw);
    assert_eq!(
        no_temporaries_within(export.path()),
        Vec::<String>::new(),
        "the temporary file outlived its session"
    );
    assert_eq!(
        std::fs::read(export.path().join("doc")).unwrap(),
        b"old version"
    );
    // The upload is gone with its session.
    let (_, r) = other.call(&Request::PutCommit { upload });
    assert_eq!(r.unwrap_err().code, ErrorCode::Stale);
    assert_eq!(
        std::fs::read(export.path().join("doc")).unwrap(),
        b"old version"
    );
}

#[test]
fn a_silent_udp_client_s_upload_goes_when_its_session_expires() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("doc"), b"old version").unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::BOTH,
        ServerOptions {
            session_idle: Duration::from_secs(1),
            ..ServerOptions::default()
        },
    );
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let call = |session: u64, xid: u64, req: &Request<'_>| {
        let mut m = Vec::new();
        encode_request(session, xid, req, &mut m).unwrap();
        sock.send(&m).unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = sock.recv(&mut buf).unwrap();
        buf.truncate(n);
        buf
    };
    // UDP: the first hello is answered with a cookie to send back.
    let hello = |cookie| Request::Hello {
        nonce: [5; 16],
        cookie,
    };
    let retry = call(0, 1, &hello([0; COOKIE_LEN]));
    let (_, _, r) = decode_reply(&retry).unwrap();
    let Ok(Reply::Retry { cookie }) = r else {
        panic!("{r:?}")
    };
    let welcome = call(0, 1, &hello(cookie));
    let (h, _, r) = decode_reply(&welcome).unwrap();
    let Ok(Reply::Welcome { root, .. }) = r else {
        panic!("{r:?}")
    };
    let begun = call(
        h.session,
        2,
        &Request::PutBegin {
            dir: root,
            name: b"doc",
            mode: 0o644,
            size: 0,
        },
    );
    let (_, _, r) = decode_reply(&begun).unwrap();
    let Ok(Reply::Handle { handle: upload, .. }) = r else {
        panic!("{r:?}")
    };
    let written = call(
        h.session,
        3,
        &Request::Write {
            file: upload,
            offset: 0,
            data: b"half of the new version",
        },
    );
    assert!(decode_reply(&written).unwrap().2.is_ok());
    assert_eq!(temporaries(export.path()).len(), 1);
    // The client goes silent, as a killed one would.
    assert_eq!(no_temporaries_within(export.path()), Vec::<String>::new());
    assert_eq!(
        std::fs::read(export.path().join("doc")).unwrap(),
        b"old version"
    );
}

#[test]
fn a_put_to_a_server_without_atomic_puts_says_to_upgrade_it() {
    // A server of the previous protocol: it answers every operation it
    // does not know with UNSUPPORTED, as `osprobe rfs serve` always has.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let old_server = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 70_000];
            while !done.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let Ok((h, _)) = decode_header(&buf[..n]) else {
                    continue;
                };
                let mut out = Vec::new();
                match Op::from_code(h.opcode) {
                    Some(Op::Hello) => encode_reply(
                        7,
                        h.xid,
                        Op::Hello,
                        &Ok(Reply::Welcome {
                            nonce: [0; 32],
                            auth_required: false,
                            root: Handle([1; 16]),
                            max_data: 4096,
                            drc_span: 64,
                        }),
                        &mut out,
                    )
                    .unwrap(),
                    Some(Op::Goodbye) => {
                        encode_reply(7, h.xid, Op::Goodbye, &Ok(Reply::Done), &mut out).unwrap()
                    }
                    _ => encode_error_reply(
                        h.session,
                        h.xid,
                        h.opcode,
                        &RemoteError::new(
                            ErrorCode::Unsupported,
                            format!("unknown operation code {:#04x}", h.opcode),
                        ),
                        &mut out,
                    ),
                }
                let _ = sock.send_to(&out, from);
            }
        })
    };
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("f"), b"data").unwrap();
    let mut c = Client::connect(addr, options(Transport::Udp, 4, 4096)).unwrap();
    let e = c
        .put(&local.path().join("f"), "f", &mut |_| {})
        .unwrap_err();
    assert!(matches!(e, ClientError::OldServer { .. }), "{e}");
    assert!(e.to_string().contains("upgrade"), "{e}");
    drop(c);
    done.store(true, Ordering::Relaxed);
    old_server.join().unwrap();
}

#[test]
fn get_never_follows_a_link_planted_at_a_partial_name() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let content = data(50_000, 11);
    std::fs::write(export.path().join("report"), &content).unwrap();
    // Another local user plants links where a partial file could go: the
    // name older clients used (with this process's id) and a few more.
    let victim = elsewhere.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let pid = std::process::id();
    for name in [
        format!(".report.rfs-partial-{pid}"),
        ".report.osprobe-get-0000000000000000".to_string(),
    ] {
        std::os::unix::fs::symlink(&victim, local.path().join(name)).unwrap();
    }
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Udp, 8, 8192)).unwrap();
    let target = local.path().join("report");
    c.get("report", &target, &mut |_| {}).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), content);
    assert!(!target.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // Nothing left but the planted links and the copy.
    let mut names: Vec<String> = std::fs::read_dir(local.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn get_stops_when_the_file_changes_size_during_the_transfer() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let remote = export.path().join("growing.log");
    std::fs::write(&remote, data(2_000_000, 12)).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    for transport in [Transport::Udp, Transport::Tcp] {
        std::fs::write(&remote, data(2_000_000, 12)).unwrap();
        let mut c = Client::connect(server.addr, options(transport, 4, 4096)).unwrap();
        let target = local.path().join("growing.log");
        let mut appended = false;
        let e = c
            .get("growing.log", &target, &mut |_| {
                // A writer on the server appends while we read.
                if !appended {
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&remote)
                        .unwrap();
                    f.write_all(&data(100_000, 13)).unwrap();
                    appended = true;
                }
            })
            .unwrap_err();
        assert!(matches!(e, ClientError::SizeChanged { .. }), "{e}");
        assert!(e.to_string().contains("changed during the transfer"), "{e}");
        assert!(!target.exists());
        assert_eq!(
            std::fs::read_dir(local.path()).unwrap().count(),
            0,
            "the partial copy was removed"
        );
    }
}

#[test]
fn uploads_left_by_a_killed_server_are_swept() {
    use osprobe_core::owner::Owner;
    let export = tempfile::tempdir().unwrap();
    std::fs::create_dir(export.path().join("sub")).unwrap();
    let me = Owner::current();
    // A server that is gone: this pid, started at another time.
    let gone = Owner {
        pid: me.pid,
        start: me.start + 1,
    };
    let upload = |dir: &str, owner: &Owner| {
        let name = format!(".doc.osprobe-put-{}-00000000000000aa", owner.tag());
        let path = export.path().join(dir).join(name);
        std::fs::write(&path, b"partial").unwrap();
        path
    };
    let dead_root = upload("", &gone);
    let dead_sub = upload("sub", &gone);
    let live_sub = upload("sub", &me);
    let other = export.path().join(".doc.osprobe-put-notes");
    std::fs::write(&other, b"a user's file").unwrap();

    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    // At start: the root only.
    assert!(
        !dead_root.exists(),
        "the dead server's upload at the root stayed"
    );
    assert!(dead_sub.exists() && live_sub.exists() && other.exists());
    // The first put into a directory sweeps it, sparing live servers' uploads.
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("doc"), b"new").unwrap();
    let mut c = Client::connect(server.addr, options(Transport::Tcp, 4, 4096)).unwrap();
    c.put(&local.path().join("doc"), "sub/doc", &mut |_| {})
        .unwrap();
    assert!(
        !dead_sub.exists(),
        "the dead server's upload in sub/ stayed"
    );
    assert!(live_sub.exists(), "a live server's upload was removed");
    assert!(other.exists(), "a name that is not an upload was removed");
    assert_eq!(
        std::fs::read(export.path().join("sub/doc")).unwrap(),
        b"new"
    );
}

/// A UDP session (cookie round trip included): the socket, the session id
/// and the root handle.
fn udp_session(server: SocketAddr, nonce: u8) -> (UdpSocket, u64, Handle) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(server).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut cookie = [0; COOKIE_LEN];
    for _ in 0..2 {
        let hello = Request::Hello {
            nonce: [nonce; 16],
            cookie,
        };
        let (h, r) = udp_call(&sock, 0, 1, &hello);
        match r {
            Ok(Reply::Retry { cookie: c }) => cookie = c,
            Ok(Reply::Welcome { root, .. }) => return (sock, h, root),
            other => panic!("{other:?}"),
        }
    }
    panic!("no welcome after the cookie round trip")
}

fn udp_call(
    sock: &UdpSocket,
    session: u64,
    xid: u64,
    req: &Request<'_>,
) -> (u64, Result<Reply<'static>, RemoteError>) {
    let mut m = Vec::new();
    encode_request(session, xid, req, &mut m).unwrap();
    sock.send(&m).unwrap();
    let mut buf = vec![0u8; 70_000];
    let n = sock.recv(&mut buf).unwrap();
    let (h, _, r) = decode_reply(&buf[..n]).unwrap();
    let r = r.map(owned);
    (h.session, r)
}

/// Over UDP a hash runs on the server's hasher threads, outside the
/// request path: it must still refuse another session's upload.
#[test]
fn another_session_cannot_hash_an_upload_over_udp() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let (owner, owner_session, root) = udp_session(server.addr, 1);
    let (_, begun) = udp_call(
        &owner,
        owner_session,
        2,
        &Request::PutBegin {
            dir: root,
            name: b"doc",
            mode: 0o644,
            size: 0,
        },
    );
    let Ok(Reply::Handle { handle: upload, .. }) = begun else {
        panic!("{begun:?}")
    };
    let (_, own) = udp_call(&owner, owner_session, 3, &Request::Hash { file: upload });
    assert!(matches!(own, Ok(Reply::Hash { .. })), "{own:?}");
    let (stranger, stranger_session, _) = udp_session(server.addr, 2);
    let (_, theirs) = udp_call(
        &stranger,
        stranger_session,
        2,
        &Request::Hash { file: upload },
    );
    assert!(
        theirs.is_err(),
        "another session hashed the upload: {theirs:?}"
    );
}

/// A reply that outlives its datagram (the variants these tests expect).
fn owned(reply: Reply<'_>) -> Reply<'static> {
    match reply {
        Reply::Retry { cookie } => Reply::Retry { cookie },
        Reply::Welcome {
            nonce,
            auth_required,
            root,
            max_data,
            drc_span,
        } => Reply::Welcome {
            nonce,
            auth_required,
            root,
            max_data,
            drc_span,
        },
        Reply::Handle { handle, attr } => Reply::Handle { handle, attr },
        Reply::Written { count, size } => Reply::Written { count, size },
        Reply::Hash { size, hash } => Reply::Hash { size, hash },
        Reply::Done => Reply::Done,
        other => panic!("unexpected reply {other:?}"),
    }
}
