//! Client and server over real sockets on 127.0.0.1: transfers over UDP
//! and TCP, through a lossy relay and a delayed one, the SOS calls, and
//! the errors a user must be able to understand.

mod common;

use common::{data, options, TestServer};
use osprobe_rfs::{
    Client, ClientError, CreateHow, ErrorCode, Kind, LossyRelay, OpenMode, RelayOptions,
    ServerOptions, Transport, Transports,
};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

#[test]
fn put_and_get_over_udp_with_5_percent_loss_arrive_byte_identical() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let relay = LossyRelay::start(
        server.addr,
        RelayOptions {
            loss: 0.05,
            seed: 7,
            ..Default::default()
        },
    )
    .unwrap();
    let content = data(3 << 20, 1);
    let src = local.path().join("src.bin");
    std::fs::write(&src, &content).unwrap();

    let mut client = Client::connect(relay.addr(), options(Transport::Udp, 16, 16 * 1024)).unwrap();
    let mut last = None;
    let put = client
        .put(&src, "copy.bin", &mut |p| last = Some(p))
        .unwrap();
    assert_eq!(put.bytes, content.len() as u64);
    let last = last.unwrap();
    assert_eq!(
        (last.done, last.total),
        (content.len() as u64, content.len() as u64)
    );
    assert_eq!(
        std::fs::read(export.path().join("copy.bin")).unwrap(),
        content
    );

    let dst = local.path().join("back.bin");
    let get = client.get("copy.bin", &dst, &mut |_| {}).unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), content);
    assert_eq!(get.hash, put.hash);
    assert_eq!(get.hash, xxhash_rust::xxh3::xxh3_128(&content));

    // The loss really happened and was repaired by retransmission; the
    // server answered some duplicates from its cache or dropped them.
    assert!(relay.stats().dropped > 0, "{:?}", relay.stats());
    let stats = client.stats();
    assert!(stats.retransmissions > 0, "{stats:?}");
    assert!(put.retransmissions + get.retransmissions > 0);
    let s = server.server.stats();
    assert!(s.bytes_written >= content.len() as u64);
    // No partial download was left behind.
    let names: Vec<_> = std::fs::read_dir(local.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn window_1_and_window_32_both_work_over_udp_and_tcp() {
    let export = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let content = data((2 << 20) + 12_345, 2);
    let src = local.path().join("src.bin");
    std::fs::write(&src, &content).unwrap();
    for transport in [Transport::Udp, Transport::Tcp] {
        for window in [1, 32] {
            let mut c =
                Client::connect(server.addr, options(transport, window, 32 * 1024)).unwrap();
            let name = format!("f-{transport}-{window}");
            c.put(&src, &name, &mut |_| {}).unwrap();
            let dst = local.path().join(&name);
            c.get(&name, &dst, &mut |_| {}).unwrap();
            assert_eq!(std::fs::read(&dst).unwrap(), content, "{name}");
            c.disconnect().unwrap();
        }
    }
    // Every client said goodbye.
    assert_eq!(server.server.stats().sessions_open, 0);
}

#[test]
fn reads_of_every_size_and_window_return_the_files_bytes() {
    let export = tempfile::tempdir().unwrap();
    let content = data((1 << 20) + 4321, 5);
    std::fs::write(export.path().join("f"), &content).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    for transport in [Transport::Udp, Transport::Tcp] {
        for (window, packet) in [(1, 32 << 10), (4, 4096), (32, 32 << 10), (7, 20_000)] {
            let mut c = Client::connect(server.addr, options(transport, window, packet)).unwrap();
            let fd = c.open("f", OpenMode::Read).unwrap();
            let what = format!("{transport} window {window} packet {packet}");
            // The whole file, into a buffer larger than it (the last
            // requests come back short, then empty).
            let mut buf = vec![0u8; content.len() + 3 * packet];
            let n = c.read_at(fd, 0, &mut buf).unwrap();
            assert_eq!(n, content.len(), "{what}");
            assert!(buf[..n] == content[..], "{what}: the bytes differ");
            // Again, on the same connection, from an odd offset.
            let mut buf = vec![0u8; 300_000];
            assert_eq!(
                c.read_at(fd, 12_345, &mut buf).unwrap(),
                buf.len(),
                "{what}"
            );
            assert!(
                buf[..] == content[12_345..312_345],
                "{what}: the bytes differ"
            );
            // Past the end: nothing.
            assert_eq!(
                c.read_at(fd, content.len() as u64 + 1, &mut buf).unwrap(),
                0
            );
            c.disconnect().unwrap();
        }
    }
}

#[test]
fn a_wider_window_is_faster_over_a_delayed_path() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("f"), data(1 << 20, 3)).unwrap();
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let relay = LossyRelay::start(
        server.addr,
        RelayOptions {
            delay: Duration::from_millis(2),
            ..Default::default()
        },
    )
    .unwrap();
    let time = |window| {
        let mut c =
            Client::connect(relay.addr(), options(Transport::Udp, window, 32 * 1024)).unwrap();
        let fd = c.open("f", OpenMode::Read).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let t = Instant::now();
        assert_eq!(c.read(fd, &mut buf).unwrap(), 1 << 20);
        t.elapsed()
    };
    let narrow = time(1);
    let wide = time(32);
    // 32 requests: 32 round trips of at least 4 ms with a window of one,
    // a handful with 32 in flight. Only the ordering is asserted.
    assert!(
        narrow > wide * 2,
        "window 1 took {narrow:?}, window 32 {wide:?}"
    );
}

#[test]
fn the_sos_calls_work() {
    let export = tempfile::tempdir().unwrap();
    std::fs::create_dir(export.path().join("sub")).unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut c = Client::connect(server.addr, options(transport, 4, 1000)).unwrap();
        let path = format!("sub/{transport}.txt");
        let fd = c.create(&path, CreateHow::Exclusive, 0o640).unwrap();
        let text = data(10_000, 4);
        assert_eq!(c.write(fd, &text[..6000]).unwrap(), 6000);
        assert_eq!(c.write(fd, &text[6000..]).unwrap(), 4000);
        c.sync(fd).unwrap();
        assert_eq!(c.fstat(fd).unwrap().size, 10_000);
        c.close(fd).unwrap();
        assert!(matches!(c.close(fd), Err(ClientError::BadFd { .. })));
        // Exclusive create of an existing file: EXIST.
        let e = c.create(&path, CreateHow::Exclusive, 0o640).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Exist), "{e}");

        // Sequential reads in odd sizes return the file in order.
        let fd = c.open(&path, OpenMode::Read).unwrap();
        let mut back = Vec::new();
        let mut buf = vec![0u8; 3333];
        loop {
            let n = c.read(fd, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        assert_eq!(back, text);
        let mut four = [0u8; 4];
        assert_eq!(c.read_at(fd, 9_998, &mut four).unwrap(), 2);
        c.seek(fd, 5).unwrap();
        assert_eq!(c.read(fd, &mut four).unwrap(), 4);
        assert_eq!(&four, &text[5..9]);
        assert!(matches!(c.write(fd, b"x"), Err(ClientError::BadFd { .. })));
        c.close(fd).unwrap();

        let st = c.stat(&path).unwrap();
        assert_eq!((st.kind, st.size, st.mode), (Kind::File, 10_000, 0o640));
        assert_eq!(c.stat("/sub").unwrap().kind, Kind::Dir);
        assert_eq!(c.stat("").unwrap().kind, Kind::Dir);

        // getdirent walks the directory entry by entry.
        let mut names = Vec::new();
        let mut i = 0;
        while let Some(e) = c.getdirent("sub", i).unwrap() {
            names.push(e.name_lossy());
            i += 1;
        }
        assert!(names.contains(&format!("{transport}.txt")), "{names:?}");
        assert_eq!(c.readdir("sub").unwrap().len(), names.len());

        c.remove(&path).unwrap();
        let e = c.stat(&path).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::NoEnt));
        assert!(e.to_string().contains(&path), "{e}");
        let e = c.open("sub", OpenMode::Read).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let e = c.open("../etc/passwd", OpenMode::Read).unwrap_err();
        assert!(matches!(e, ClientError::BadPath { .. }), "{e}");
    }
}

#[test]
fn many_directory_entries_are_listed_in_pages() {
    let export = tempfile::tempdir().unwrap();
    for i in 0..700 {
        std::fs::write(export.path().join(format!("entry-{i:04}")), b"").unwrap();
    }
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let mut c = Client::connect(server.addr, options(Transport::Udp, 4, 4096)).unwrap();
    let mut all: Vec<String> = c
        .readdir("/")
        .unwrap()
        .iter()
        .map(|e| e.name_lossy())
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 700);
    assert!(c.getdirent("/", 699).unwrap().is_some());
    assert!(c.getdirent("/", 700).unwrap().is_none());
}

#[test]
fn a_read_only_export_refuses_writes() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("keep"), b"original").unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::BOTH,
        ServerOptions {
            read_only: true,
            ..Default::default()
        },
    );
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("x"), b"new").unwrap();
    let mut c = Client::connect(server.addr, options(Transport::Udp, 4, 1024)).unwrap();
    let e = c
        .put(&local.path().join("x"), "keep", &mut |_| {})
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ReadOnly), "{e}");
    let fd = c.open("keep", OpenMode::ReadWrite).unwrap();
    assert_eq!(
        c.write(fd, b"zzz").unwrap_err().code(),
        Some(ErrorCode::ReadOnly)
    );
    assert_eq!(
        c.remove("keep").unwrap_err().code(),
        Some(ErrorCode::ReadOnly)
    );
    let mut buf = [0u8; 8];
    assert_eq!(c.read(fd, &mut buf).unwrap(), 8);
    assert_eq!(
        std::fs::read(export.path().join("keep")).unwrap(),
        b"original"
    );
    c.get("keep", &local.path().join("got"), &mut |_| {})
        .unwrap();
}

#[test]
fn tokens_are_required_checked_and_never_sent() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        Transports::BOTH,
        ServerOptions {
            token: Some("correct horse".into()),
            ..Default::default()
        },
    );
    for transport in [Transport::Udp, Transport::Tcp] {
        let e = Client::connect(server.addr, options(transport, 1, 1024))
            .err()
            .unwrap();
        assert!(matches!(e, ClientError::TokenRequired { .. }), "{e}");
        let mut wrong = options(transport, 1, 1024);
        wrong.token = Some("battery staple".into());
        let e = Client::connect(server.addr, wrong).err().unwrap();
        assert_eq!(e.code(), Some(ErrorCode::Auth), "{e}");
        let mut right = options(transport, 1, 1024);
        right.token = Some("correct horse".into());
        let mut c = Client::connect(server.addr, right).unwrap();
        c.stat("/").unwrap();
    }
}

#[test]
fn a_silent_server_gives_a_clear_timeout() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut o = options(Transport::Udp, 1, 1024);
    o.initial_rto = Duration::from_millis(10);
    o.max_rto = Duration::from_millis(40);
    o.max_tries = 4;
    let t = Instant::now();
    let e = Client::connect(silent.local_addr().unwrap(), o.clone())
        .err()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    match &e {
        ClientError::TimedOut { tries, .. } => assert_eq!(*tries, 4),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("hello"), "{e}");
    // A closed port says so.
    let port = silent.local_addr().unwrap();
    drop(silent);
    let e = Client::connect(port, o).err().unwrap();
    assert!(e.to_string().contains("port is closed"), "{e}");
}

#[test]
fn a_restarted_server_is_reported_clearly() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("f"), b"data").unwrap();
    let server = TestServer::start(export.path(), Transports::BOTH, ServerOptions::default());
    let addr = server.addr;
    let mut udp = Client::connect(addr, options(Transport::Udp, 2, 1024)).unwrap();
    let mut tcp = Client::connect(addr, options(Transport::Tcp, 2, 1024)).unwrap();
    let fd = udp.open("f", OpenMode::Read).unwrap();
    server.stop();
    let _again = TestServer::start_at(
        addr,
        export.path(),
        Transports::BOTH,
        ServerOptions::default(),
    );
    let mut buf = [0u8; 4];
    let e = udp.read(fd, &mut buf).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadSession), "{e}");
    assert!(e.to_string().contains("restarted"), "{e}");
    let e = tcp.stat("f").unwrap_err();
    assert!(matches!(e, ClientError::ConnectionLost { .. }), "{e}");
    // A new client of the new server works.
    let mut c = Client::connect(addr, options(Transport::Udp, 2, 1024)).unwrap();
    assert_eq!(c.stat("f").unwrap().size, 4);
}

#[test]
fn bad_client_options_are_named() {
    let addr = "127.0.0.1:9".parse().unwrap();
    let cases = [
        (options(Transport::Udp, 0, 1024), "window"),
        (options(Transport::Udp, 257, 1024), "window"),
        (options(Transport::Udp, 1, 65_536), "packet"),
        (options(Transport::Tcp, 1, 65_537), "packet"),
        (options(Transport::Udp, 1, 0), "packet"),
    ];
    for (o, what) in cases {
        let e = Client::connect(addr, o).err().unwrap();
        assert!(matches!(e, ClientError::Option { .. }), "{e}");
        assert!(e.to_string().starts_with(what), "{e}");
    }
    let e = Client::connect(addr, options(Transport::Udp, 1, 65_536))
        .err()
        .unwrap();
    assert!(e.to_string().contains("use TCP"), "{e}");
}

#[test]
fn a_full_disk_is_reported_as_nospc() {
    // A 1 MiB tmpfs needs root (mount); in CI, where tests run as root,
    // this must not be skipped.
    let export = tempfile::tempdir().unwrap();
    let Some(_mount) = Tmpfs::mount(export.path(), "1m") else {
        osprobe_core::testing::skip("cannot mount a 1 MiB tmpfs (needs root)");
        return;
    };
    let server = TestServer::start(export.path(), Transports::UDP, ServerOptions::default());
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("big");
    std::fs::write(&src, data(3 << 20, 9)).unwrap();
    let mut c = Client::connect(server.addr, options(Transport::Udp, 8, 32 * 1024)).unwrap();
    let e = c.put(&src, "big", &mut |_| {}).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NoSpace), "{e}");
    // The failed put removed what it wrote (nothing under the name looks
    // like a copy), the server still answers, and a small file fits.
    let gone = c.stat("big").unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::NoEnt), "{gone}");
    std::fs::write(&src, b"small").unwrap();
    c.put(&src, "small", &mut |_| {}).unwrap();
    drop(c);
    server.stop();
}

/// A tmpfs mounted for the life of the value.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
