//! `serve --dir` promises disk space up front: sessions that together do
//! not fit are refused at the start, and `--max-bytes` bounds what the
//! server keeps.

mod common;

use common::TestServer;
use osprobe_net::client::{NetError, Peer};
use osprobe_net::protocol::{ErrorCode, TestSpec};
use osprobe_net::send::{SendError, SendRequest};
use osprobe_net::server::ServerConfig;
use osprobe_net::transfer::SendMethod;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn named_file(name: &str, bytes: u64) -> TestSpec {
    TestSpec::File {
        streams: 1,
        bytes,
        packet: 65536,
        name: Some(name.into()),
        zero_copy: false,
    }
}

/// A small tmpfs mounted on a temporary directory, unmounted (lazily, so
/// even a file left open cannot keep it) when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        if !osprobe_core::sys::is_root() {
            return Err("needs root to mount a tmpfs".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let options = CString::new(format!("size={size}")).unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"osprobe-test".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(format!("mount tmpfs: {}", std::io::Error::last_os_error()));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.dir.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path we mounted.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn two_sessions_that_together_do_not_fit_are_refused_up_front() {
    let fs = match Tmpfs::mount("8m") {
        Ok(fs) => fs,
        Err(why) => {
            osprobe_core::testing::skip(why);
            return;
        }
    };
    let server = TestServer::start(ServerConfig {
        dir: Some(fs.path().to_path_buf()),
        ..ServerConfig::default()
    });
    let peer = Peer::new(server.addr, None);
    let first = peer
        .open(named_file("a.bin", 5 * MIB), Duration::from_secs(10))
        .expect("5 MiB fit on 8 MiB");
    // Nothing written yet: free space alone says 8 MiB; the promise to the
    // first session says 3.
    match peer.open(named_file("b.bin", 5 * MIB), Duration::from_secs(10)) {
        Err(NetError::Refused {
            code: ErrorCode::Storage,
            message,
            ..
        }) => assert!(message.contains("not enough space"), "{message}"),
        other => panic!("the second 5 MiB session was admitted: {:?}", other.err()),
    }
    // A session that ends releases its promise.
    drop(first);
    let again = (0..50).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        peer.open(named_file("b.bin", 5 * MIB), Duration::from_secs(10))
            .ok()
    });
    assert!(again.is_some(), "the space was not released");
}

fn write_file(path: &Path, bytes: u64) {
    std::fs::write(path, vec![b'x'; bytes as usize]).unwrap();
}

#[test]
fn max_bytes_bounds_what_the_server_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let sources = tempfile::tempdir().unwrap();
    // Already there when the server starts: counts.
    write_file(&dir.path().join("old.bin"), 300 * 1024);
    let server = TestServer::start(ServerConfig {
        dir: Some(dir.path().to_path_buf()),
        max_bytes: Some(MIB),
        ..ServerConfig::default()
    });
    let peer = Peer::new(server.addr, None);
    let send = |name: &str, bytes: u64| {
        let file = sources.path().join(name);
        write_file(&file, bytes);
        let request = SendRequest {
            file,
            name: Some(name.into()),
            method: SendMethod::Packets,
            packet: 65536,
        };
        osprobe_net::send::send(&peer, &request, &AtomicBool::new(false), &mut |_, _| {})
    };
    send("first.bin", 600 * 1024).expect("300 + 600 KiB fit in 1 MiB");
    match send("second.bin", 200 * 1024) {
        Err(e @ SendError::Net(_)) => {
            let text = e.to_string();
            assert!(
                text.contains("--max-bytes") && text.contains("1048576"),
                "{text}"
            );
        }
        other => panic!(
            "over --max-bytes and admitted: {:?}",
            other.map(|o| o.bytes)
        ),
    }
    assert!(!dir.path().join("second.bin").exists());
}
