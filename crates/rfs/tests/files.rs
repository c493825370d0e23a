//! File semantics on the server: what reads open, what writes refuse,
//! and what an interrupted put leaves behind.

mod common;

use common::{data, options, TestServer};
use osprobe_rfs::{Client, CreateHow, ErrorCode, OpenMode, ServerOptions, Transport, Transports};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};

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

    // An ordinary file is still written.
    let fd = c.create("plain", CreateHow::Truncate, 0o644).unwrap();
    assert_eq!(c.write(fd, &data(100, 1)).unwrap(), 100);
    let fd = c.create("plain", CreateHow::Truncate, 0o644).unwrap();
    assert_eq!(c.fstat(fd).unwrap().size, 0);
}
