//! The pager's swap on the remote file service: a file of its own per
//! client, gone when the client is, and every page checked on the way
//! back. Loopback only; no userfaultfd needed.

use osprobe_pager::swap::{RfsSwap, SwapBackend, SwapError, Verified};
use osprobe_rfs::{Client, ClientOptions, Server, ServerOptions, Transport, Transports};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// An rfs server on 127.0.0.1 exporting `dir`, stopped when dropped.
struct TestServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start(dir: &Path, options: ServerOptions) -> TestServer {
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            Transports::BOTH,
            dir,
            options,
        )
        .unwrap();
        let addr = server.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || server.serve(&stop).unwrap())
        };
        TestServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn client(&self, transport: Transport) -> Client {
        let options = ClientOptions {
            transport,
            window: 4,
            packet: PAGE,
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_millis(400),
            max_tries: 12,
            timeout: Duration::from_secs(5),
            ..ClientOptions::default()
        };
        Client::connect(self.addr, options).unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn page(fill: u8) -> Vec<u8> {
    (0..PAGE).map(|i| fill ^ (i as u8)).collect()
}

/// The scratch files in the export (the swap files of live sessions).
fn scratch_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".osprobe-put-"))
        .collect()
}

/// Poll (up to 10 s) until the export holds no scratch file.
fn scratch_files_after_waiting(dir: &Path) -> Vec<std::path::PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = scratch_files(dir);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_pagers_on_one_server_have_swap_files_of_their_own() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("osprobe-pager.swap"), b"someone's file").unwrap();
    let server = TestServer::start(export.path(), ServerOptions::default());
    let mut a = RfsSwap::create(server.client(Transport::Udp), "osprobe-pager.swap").unwrap();
    let mut b = RfsSwap::create(server.client(Transport::Tcp), "osprobe-pager.swap").unwrap();
    assert_eq!(scratch_files(export.path()).len(), 2);
    for slot in 0..4 {
        a.write_page(slot, &page(0xa0 + slot as u8)).unwrap();
        b.write_page(slot, &page(0xb0 + slot as u8)).unwrap();
    }
    let mut back = vec![0u8; PAGE];
    for slot in 0..4 {
        a.read_page(slot, &mut back).unwrap();
        assert_eq!(back, page(0xa0 + slot as u8), "pager a, slot {slot}");
        b.read_page(slot, &mut back).unwrap();
        assert_eq!(back, page(0xb0 + slot as u8), "pager b, slot {slot}");
    }
    drop(a);
    drop(b);
    assert_eq!(
        scratch_files(export.path()),
        Vec::<std::path::PathBuf>::new()
    );
    // The name they were placed beside is untouched.
    assert_eq!(
        std::fs::read(export.path().join("osprobe-pager.swap")).unwrap(),
        b"someone's file"
    );
}

#[test]
fn a_swap_slot_corrupted_on_the_server_is_detected() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path(), ServerOptions::default());
    let swap = RfsSwap::create(server.client(Transport::Udp), "swap").unwrap();
    let mut swap = Verified::new(Box::new(swap));
    swap.write_page(0, &page(1)).unwrap();
    swap.write_page(1, &page(2)).unwrap();
    // Someone with access to the export changes one byte of slot 1.
    let files = scratch_files(export.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"X", PAGE as u64 + 100).unwrap();
    let mut back = vec![0u8; PAGE];
    swap.read_page(0, &mut back).unwrap();
    assert_eq!(back, page(1));
    let e = swap.read_page(1, &mut back).unwrap_err();
    assert!(matches!(e, SwapError::Corrupt { slot: 1, .. }), "{e}");
    assert!(e.to_string().contains("corrupted"), "{e}");
    assert!(
        back.iter().all(|&b| b == 0),
        "no corrupted byte is handed on"
    );
    // A slot never written is an error too, not zeros or stale data.
    assert!(matches!(
        swap.read_page(7, &mut back),
        Err(SwapError::NeverWritten { slot: 7, .. })
    ));
}

#[test]
fn a_killed_pager_s_swap_file_goes_with_its_session() {
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        export.path(),
        ServerOptions {
            session_idle: Duration::from_secs(1),
            ..ServerOptions::default()
        },
    );
    // Forgetting the swap skips its discard and the client's goodbye, as
    // kill -9 would: the server hears nothing more from the session and
    // ends it after its idle time. (Over TCP the session ends with the
    // connection, which the kernel closes; the rfs tests cover that.)
    let mut swap = RfsSwap::create(server.client(Transport::Udp), "swap").unwrap();
    swap.write_page(0, &page(4)).unwrap();
    assert_eq!(scratch_files(export.path()).len(), 1);
    std::mem::forget(swap);
    assert_eq!(
        scratch_files_after_waiting(export.path()),
        Vec::<std::path::PathBuf>::new()
    );
}
