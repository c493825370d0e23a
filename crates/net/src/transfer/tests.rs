//! Transfers end to end over loopback: both sides, every method, and
//! what happens when the peer misbehaves.

use super::partial::PARTIAL_MARK;
use super::*;
use osprobe_core::scratch::ScratchDir;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

const PATIENCE: Duration = Duration::from_secs(20);

fn connected_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn partial_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(PARTIAL_MARK))
        .collect()
}

/// Send `src` with `method` while a thread receives it into `dest`.
fn transfer(
    src: &Path,
    dest: &Path,
    packet: usize,
    method: SendMethod,
) -> (
    Result<TxReport, TransferError>,
    Result<RxReport, TransferError>,
) {
    let (tx_stream, rx_stream) = connected_pair();
    tx_stream.set_write_timeout(Some(PATIENCE)).unwrap();
    let expected = std::fs::metadata(src).unwrap().len();
    let dest = dest.to_path_buf();
    let receiver = thread::spawn(move || {
        let never = AtomicBool::new(false);
        receive_file(&rx_stream, &dest, expected, packet, &never, PATIENCE)
    });
    let never = AtomicBool::new(false);
    let mut last_progress = 0;
    let tx = send_file(&tx_stream, src, packet, method, &never, &mut |n| {
        assert!(n >= last_progress);
        last_progress = n;
    });
    if tx.is_ok() {
        assert_eq!(last_progress, expected, "progress ends at the file size");
    }
    drop(tx_stream);
    (tx, receiver.join().unwrap())
}

#[test]
fn files_arrive_byte_identical_for_every_size_packet_and_method() {
    let scratch = ScratchDir::new().unwrap();
    let out = scratch.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for (i, size) in [0u64, 1, 1000, 3 << 20].into_iter().enumerate() {
        let src = create_source_file(scratch.path(), size, i as u64).unwrap();
        let source_hash = hash_file(&src).unwrap();
        for packet in [30, 1000, 65536] {
            for method in [SendMethod::Packets, SendMethod::Sendfile] {
                let label = format!("{size} B, packet {packet}, {}", method.as_str());
                let dest =
                    confine(&out, &format!("copy-{size}-{packet}-{}", method.as_str())).unwrap();
                let (tx, rx) = transfer(&src, &dest, packet, method);
                let tx = tx.unwrap_or_else(|e| panic!("{label}: {e}"));
                let rx = rx.unwrap_or_else(|e| panic!("{label}: {e}"));
                assert_eq!((tx.bytes, rx.bytes), (size, size), "{label}");
                assert_eq!(tx.method, method);
                assert_eq!(tx.hash, source_hash, "{label}");
                assert_eq!(rx.hash, source_hash, "{label}");
                assert!(rx.partial_path.exists(), "{label}");
                commit(&rx, &tx.hash, &dest, false).unwrap_or_else(|e| panic!("{label}: {e}"));
                assert!(!rx.partial_path.exists(), "{label}");
                assert_eq!(
                    std::fs::read(&dest).unwrap(),
                    std::fs::read(&src).unwrap(),
                    "{label}"
                );
                assert_eq!(hash_file(&dest).unwrap(), source_hash, "{label}");
                discard(&rx); // already committed: a no-op
                assert!(dest.exists(), "{label}");
            }
        }
    }
    assert!(partial_files(&out).is_empty());
}

#[test]
fn streaming_hash_matches_the_one_shot_hash() {
    let scratch = ScratchDir::new().unwrap();
    let src = create_source_file(scratch.path(), (3 << 20) + 7, 9).unwrap();
    let data = std::fs::read(&src).unwrap();
    let one_shot = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&data));
    assert_eq!(hash_file(&src).unwrap(), one_shot);
    assert_eq!(one_shot.len(), 32);
    let empty = create_source_file(scratch.path(), 0, 1).unwrap();
    assert_eq!(
        hash_file(&empty).unwrap(),
        format!("{:032x}", xxhash_rust::xxh3::xxh3_128(b""))
    );
}

#[test]
fn a_sender_that_closes_early_is_truncated_and_leaves_nothing() {
    let scratch = ScratchDir::new().unwrap();
    let dest = scratch.path().join("file");
    let (mut tx_stream, rx_stream) = connected_pair();
    let receiver = thread::spawn(move || {
        let never = AtomicBool::new(false);
        receive_file(&rx_stream, &dest, 1000, 64, &never, PATIENCE)
    });
    tx_stream.write_all(&[7u8; 500]).unwrap();
    tx_stream.shutdown(Shutdown::Both).unwrap();
    drop(tx_stream);
    match receiver.join().unwrap() {
        Err(TransferError::Truncated {
            expected: 1000,
            got: 500,
        }) => {}
        other => panic!("expected Truncated 500 of 1000, got {other:?}"),
    }
    assert!(partial_files(scratch.path()).is_empty());
    assert!(!scratch.path().join("file").exists());
}

#[test]
fn more_bytes_than_announced_are_refused() {
    let scratch = ScratchDir::new().unwrap();
    let dest = scratch.path().join("file");
    for packet in [4096, 100] {
        let (mut tx_stream, rx_stream) = connected_pair();
        // All 1500 bytes are queued before the receiver starts, so the
        // extra ones arrive with the expected ones or wait behind them.
        tx_stream.write_all(&[1u8; 1500]).unwrap();
        let never = AtomicBool::new(false);
        let rx = receive_file(&rx_stream, &dest, 1000, packet, &never, PATIENCE);
        assert!(
            matches!(rx, Err(TransferError::TooLong { expected: 1000 })),
            "{rx:?}"
        );
        assert!(partial_files(scratch.path()).is_empty());
    }
}

#[test]
fn a_hash_mismatch_keeps_neither_final_nor_partial_file() {
    let scratch = ScratchDir::new().unwrap();
    let src = create_source_file(scratch.path(), 5000, 3).unwrap();
    let dest = scratch.path().join("copy");
    let (tx, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
    let (tx, rx) = (tx.unwrap(), rx.unwrap());
    let wrong = "0".repeat(32);
    match commit(&rx, &wrong, &dest, true) {
        Err(TransferError::HashMismatch { expected, got }) => {
            assert_eq!(expected, wrong);
            assert_eq!(got, tx.hash);
        }
        other => panic!("expected HashMismatch, got {other:?}"),
    }
    assert!(!dest.exists());
    assert!(partial_files(scratch.path()).is_empty());
    // The report is spent: a second commit is an error, not a panic.
    assert!(matches!(
        commit(&rx, &tx.hash, &dest, true),
        Err(TransferError::Io { .. })
    ));
}

#[test]
fn hashes_compare_without_case_and_hostile_hashes_print_escaped() {
    let scratch = ScratchDir::new().unwrap();
    let src = create_source_file(scratch.path(), 100, 4).unwrap();
    let dest = scratch.path().join("copy");
    let (tx, rx) = transfer(&src, &dest, 30, SendMethod::Sendfile);
    let (tx, rx) = (tx.unwrap(), rx.unwrap());
    commit(&rx, &tx.hash.to_uppercase(), &dest, false).unwrap();
    assert!(dest.exists());

    let dest2 = scratch.path().join("copy2");
    let (_, rx) = transfer(&src, &dest2, 30, SendMethod::Packets);
    let e = commit(&rx.unwrap(), "\u{1b}[2J\u{202e}", &dest2, false).unwrap_err();
    let message = e.to_string();
    assert!(
        !message.contains('\u{1b}') && !message.contains('\u{202e}'),
        "{message}"
    );
}

#[test]
fn commit_refuses_to_overwrite_unless_allowed() {
    let scratch = ScratchDir::new().unwrap();
    let src = create_source_file(scratch.path(), 2000, 5).unwrap();
    let dest = scratch.path().join("existing");
    std::fs::write(&dest, b"keep me").unwrap();
    let (tx, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
    let (tx, rx) = (tx.unwrap(), rx.unwrap());
    match commit(&rx, &tx.hash, &dest, false) {
        Err(TransferError::AlreadyExists { path }) => assert_eq!(path, dest),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(std::fs::read(&dest).unwrap(), b"keep me");
    assert!(rx.partial_path.exists(), "kept for the caller to decide");
    commit(&rx, &tx.hash, &dest, true).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), std::fs::read(&src).unwrap());
    assert!(partial_files(scratch.path()).is_empty());
}

#[test]
fn discard_and_drop_remove_the_partial_file() {
    let scratch = ScratchDir::new().unwrap();
    let src = create_source_file(scratch.path(), 3000, 6).unwrap();
    let dest = scratch.path().join("copy");
    let (_, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
    let rx = rx.unwrap();
    assert!(rx.partial_path.exists());
    let name = rx
        .partial_path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with(".copy.osprobe-partial-"), "{name}");
    discard(&rx);
    assert!(!rx.partial_path.exists());
    discard(&rx);

    let (_, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
    let partial = rx.unwrap().partial_path.clone();
    assert!(!partial.exists(), "dropping the report removes the file");
    assert!(!dest.exists());
}

#[test]
fn a_silent_sender_times_out_and_a_stopped_receiver_stops() {
    let scratch = ScratchDir::new().unwrap();
    let dest = scratch.path().join("file");
    let (tx_stream, rx_stream) = connected_pair();
    rx_stream
        .set_read_timeout(Some(Duration::from_secs(7)))
        .unwrap();
    let never = AtomicBool::new(false);
    let idle = Duration::from_millis(300);
    let rx = receive_file(&rx_stream, &dest, 10, 64, &never, idle);
    assert!(
        matches!(rx, Err(TransferError::TimedOut { after }) if after == idle),
        "{rx:?}"
    );
    assert_eq!(
        rx_stream.read_timeout().unwrap(),
        Some(Duration::from_secs(7)),
        "restored"
    );
    let stop = AtomicBool::new(true);
    let rx = receive_file(&rx_stream, &dest, 10, 64, &stop, PATIENCE);
    assert!(matches!(rx, Err(TransferError::Interrupted)), "{rx:?}");
    assert!(partial_files(scratch.path()).is_empty());
    drop(tx_stream);
}

/// A peer that never reads: the sender fills the socket buffers, then
/// must give up on its idle limit or on the stop flag.
#[test]
fn a_sender_facing_a_peer_that_never_reads_times_out_or_stops() {
    let scratch = ScratchDir::new().unwrap();
    // Larger than loopback's send and receive buffers together.
    let src = create_source_file(scratch.path(), 48 << 20, 7).unwrap();
    for method in [SendMethod::Packets, SendMethod::Sendfile] {
        let (tx_stream, _rx_stream) = connected_pair();
        let limit = Duration::from_millis(500);
        tx_stream.set_write_timeout(Some(limit)).unwrap();
        let never = AtomicBool::new(false);
        let tx = send_file(&tx_stream, &src, 65536, method, &never, &mut |_| {});
        assert!(
            matches!(tx, Err(TransferError::TimedOut { after }) if after == limit),
            "{method:?}: {tx:?}"
        );
        assert_eq!(tx_stream.write_timeout().unwrap(), Some(limit), "restored");

        let (tx_stream, _rx_stream) = connected_pair();
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::SeqCst);
            })
        };
        let tx = send_file(&tx_stream, &src, 65536, method, &stop, &mut |_| {});
        stopper.join().unwrap();
        assert!(
            matches!(tx, Err(TransferError::Interrupted)),
            "{method:?}: {tx:?}"
        );
    }
}

#[test]
fn bad_inputs_are_named() {
    let scratch = ScratchDir::new().unwrap();
    let (tx_stream, _rx_stream) = connected_pair();
    let never = AtomicBool::new(false);
    let e = send_file(
        &tx_stream,
        scratch.path(),
        1000,
        SendMethod::Packets,
        &never,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let missing = scratch.path().join("missing");
    let e = send_file(
        &tx_stream,
        &missing,
        1000,
        SendMethod::Sendfile,
        &never,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    let src = create_source_file(scratch.path(), 10, 1).unwrap();
    for packet in [0, MAX_PACKET + 1] {
        let e = send_file(
            &tx_stream,
            &src,
            packet,
            SendMethod::Packets,
            &never,
            &mut |_| {},
        );
        assert!(
            matches!(e, Err(TransferError::BadPacketSize { .. })),
            "{e:?}"
        );
        let e = receive_file(
            &tx_stream,
            &scratch.path().join("x"),
            1,
            packet,
            &never,
            PATIENCE,
        );
        assert!(
            matches!(e, Err(TransferError::BadPacketSize { .. })),
            "{e:?}"
        );
    }
    let e = receive_file(&tx_stream, Path::new("/"), 1, 10, &never, PATIENCE).unwrap_err();
    assert!(e.to_string().contains("file name"), "{e}");
}

#[test]
fn disk_full_and_quota_errors_name_the_directory() {
    let dir = Path::new("/srv/incoming");
    for errno in [libc::ENOSPC, libc::EDQUOT] {
        let e = storage_error(io::Error::from_raw_os_error(errno), dir, "writing");
        assert!(
            matches!(&e, TransferError::DiskFull { dir: d } if d == dir),
            "{e:?}"
        );
        assert!(e.to_string().contains("/srv/incoming"), "{e}");
    }
    let e = storage_error(io::Error::from_raw_os_error(libc::EIO), dir, "writing x");
    assert!(matches!(e, TransferError::Io { .. }));
}
