//! The bulk receiver behind `net.bandwidth` and `net.cc` (the server's
//! `sink` role): read and discard until EOF, counting bytes and reads and
//! stamping the first and the last byte.
//!
//! How it reads decides what a loopback test costs the *sender*. On loopback
//! the sending CPU runs the receiving socket's TCP processing too (softirq),
//! and every segment that finds the receiver asleep costs it a wake-up of
//! the other CPU. A plain blocking read returns as soon as one segment
//! (up to 64 KiB on loopback) is queued, so the receiver sleeps and is woken
//! about twice per 128 KiB. With SO_RCVLOWAT at the read size (set once
//! the receive buffer has grown to four reads) the kernel wakes it only
//! when a whole read's worth is queued (or at EOF, or when the
//! receive buffer or the window runs short: `tcp_data_ready`), which halves
//! the wake-ups and gave the sender about a quarter more bytes per CPU
//! second in A/B runs against the plain read (bench/README.md,
//! net_compare.sh).

use crate::protocol::StreamReport;
use crate::stream_error::RoleError;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Read and discard until EOF, in reads of `read_size` bytes. A read
/// timeout set on `stream` beforehand is the idle limit: it ends the test
/// when no byte arrived in that time.
pub fn sink(
    stream: &TcpStream,
    read_size: usize,
    closed: &AtomicBool,
) -> Result<StreamReport, RoleError> {
    let tally = read_until_eof(stream, read_size, None, |_| {})
        .map_err(|e| crate::stream_error::read_error(e, closed))?;
    Ok(StreamReport {
        bytes: tally.bytes,
        reads: tally.reads,
        elapsed_ns: tally.first_to_last().as_nanos() as u64,
        tcp_info: crate::tcp_info::tcp_info(stream.as_raw_fd())
            .ok()
            .and_then(|info| serde_json::to_value(info).ok()),
        ..StreamReport::default()
    })
}

/// What a read loop counted: bytes, reads, and when the reads that
/// returned the first and the last byte did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    pub bytes: u64,
    pub reads: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

impl Tally {
    /// From the first byte to the last; zero before two reads.
    pub fn first_to_last(&self) -> Duration {
        match (self.first, self.last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            _ => Duration::ZERO,
        }
    }
}

/// The bulk receiver's read loop (the sink's, and the reverse test's at
/// the client): read and discard until EOF in reads of `read_size` bytes,
/// woken only for whole reads once the receive buffer has grown
/// ([`wake_on_whole_reads`]). `on_read` is told each read's byte count
/// (a live counter); a raised `stop`, checked before each read, ends the
/// loop as EOF does. An interrupted read is retried; any other error is
/// returned, a timeout set on the stream among them.
pub(crate) fn read_until_eof(
    mut stream: &TcpStream,
    read_size: usize,
    stop: Option<&AtomicBool>,
    mut on_read: impl FnMut(usize),
) -> io::Result<Tally> {
    let mut buf = crate::sock::PageAligned::zeroed(read_size.max(1));
    let mut tally = Tally::default();
    let mut raised = false;
    while !stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                tally.first.get_or_insert(now);
                tally.last = Some(now);
                tally.bytes += n as u64;
                tally.reads += 1;
                on_read(n);
                // Never before the first read: a raised threshold would
                // delay it, and with it the first-byte time the receiver's
                // rate is measured from. Then every 16 reads until done.
                if !raised && tally.reads % 16 == 1 {
                    raised = wake_on_whole_reads(stream.as_raw_fd(), buf.len());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(tally)
}

/// Wake a blocked read on `fd` only when `bytes` are queued (or at EOF,
/// or when the receive buffer or window runs short). Best effort: where the
/// option is refused the sink reads as before, only at a higher cost.
///
/// The idle timeout keeps its meaning: a read that times out returns the
/// bytes it has gathered so far, and fails only when none came at all.
///
/// Only once the receive buffer has grown to [`BUFFER_READS`] reads: on a
/// smaller buffer the kernel grows it to fit the mark and clamps the
/// window to the mark (`tcp_set_rcvlowat`), which held an emulated 20 ms
/// path at a sixth of its rate. True when done (or nothing to do).
fn wake_on_whole_reads(fd: RawFd, bytes: usize) -> bool {
    let bytes = bytes.min(libc::c_int::MAX as usize / BUFFER_READS) as libc::c_int;
    if bytes <= 1 {
        return true;
    }
    match crate::sock::get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF) {
        Ok(buffer) if buffer >= bytes * BUFFER_READS as libc::c_int => {
            let _ = crate::sock::set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes);
            true
        }
        Ok(_) => false,
        Err(_) => true,
    }
}

/// The receive buffer, in reads, before the sink raises its wake-up mark.
const BUFFER_READS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{Shutdown, TcpListener};
    use std::time::Duration;

    /// A connected pair on loopback: (the sender's end, the sink's end),
    /// the sink's end with `idle` as its read timeout.
    fn pair(idle: Duration) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (receiver, _) = listener.accept().unwrap();
        receiver.set_read_timeout(Some(idle)).unwrap();
        (sender, receiver)
    }

    fn low_water_mark(stream: &TcpStream) -> i32 {
        crate::sock::get_int(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap()
    }

    fn window_clamp(stream: &TcpStream) -> i32 {
        crate::sock::get_int(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
        )
        .unwrap()
    }

    /// Send `total` bytes from `sender` and close; sink them in 128 KiB reads.
    fn sink_all(mut sender: TcpStream, receiver: &TcpStream, total: usize) -> StreamReport {
        let closed = AtomicBool::new(false);
        let writer = std::thread::spawn(move || {
            sender.write_all(&vec![7u8; total]).unwrap();
            sender.shutdown(Shutdown::Write).unwrap();
            sender
        });
        let report = sink(receiver, 128 << 10, &closed).unwrap();
        drop(writer.join().unwrap());
        report
    }

    #[test]
    fn counts_every_byte_to_eof() {
        let (sender, receiver) = pair(Duration::from_secs(10));
        // Not a multiple of the read size: the tail arrives with the FIN.
        let total = 3 * (128 << 10) + 12_345;
        let report = sink_all(sender, &receiver, total);
        assert_eq!(report.bytes, total as u64);
        assert!(report.reads >= 4, "{} reads", report.reads);
        assert!(report.tcp_info.is_some());
    }

    #[test]
    fn waits_for_whole_reads_once_the_buffer_has_grown_without_clamping_the_window() {
        let (sender, receiver) = pair(Duration::from_secs(10));
        sink_all(sender, &receiver, 64 << 20);
        let buffer =
            crate::sock::get_int(receiver.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        if buffer >= (BUFFER_READS << 17) as i32 {
            assert_eq!(low_water_mark(&receiver), 128 << 10);
        }
        assert!(
            window_clamp(&receiver) > 128 << 10,
            "{}",
            window_clamp(&receiver)
        );
    }

    #[test]
    fn a_small_receive_buffer_keeps_the_default_mark() {
        let (sender, receiver) = pair(Duration::from_secs(10));
        // The kernel doubles it: 128 KiB, one read.
        crate::sock::set_int(
            receiver.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            64 << 10,
        )
        .unwrap();
        let report = sink_all(sender, &receiver, 4 << 20);
        assert_eq!(report.bytes, 4 << 20);
        assert_eq!(low_water_mark(&receiver), 1);
    }

    #[test]
    fn a_trickle_slower_than_a_read_per_idle_timeout_is_not_idle() {
        // Bytes keep coming, but far fewer than one read's worth per idle
        // timeout: a read that times out returns what it gathered, so the
        // raised wake-up threshold must not make this look idle.
        let (mut sender, receiver) = pair(Duration::from_millis(400));
        let closed = AtomicBool::new(false);
        let writer = std::thread::spawn(move || {
            for _ in 0..30 {
                sender.write_all(&[1u8; 100]).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
            sender.shutdown(Shutdown::Write).unwrap();
            sender
        });
        let report = sink(&receiver, 128 << 10, &closed).unwrap();
        drop(writer.join().unwrap());
        assert_eq!(report.bytes, 3_000);
    }

    #[test]
    fn a_silent_peer_still_ends_the_test_at_the_idle_timeout() {
        let (mut sender, receiver) = pair(Duration::from_millis(100));
        let closed = AtomicBool::new(false);
        sender.write_all(&[1u8; 10]).unwrap();
        let error = sink(&receiver, 128 << 10, &closed).unwrap_err();
        assert!(matches!(error, RoleError::PeerSilent), "{error}");
        drop(sender);
    }

    #[test]
    fn a_one_byte_read_size_keeps_the_default_threshold() {
        let (mut sender, receiver) = pair(Duration::from_secs(10));
        let closed = AtomicBool::new(false);
        sender.write_all(b"abc").unwrap();
        sender.shutdown(Shutdown::Write).unwrap();
        let report = sink(&receiver, 1, &closed).unwrap();
        assert_eq!((report.bytes, report.reads), (3, 3));
        assert_eq!(low_water_mark(&receiver), 1);
    }

    #[test]
    fn the_shared_loop_counts_live_and_stops_when_told() {
        // As the reverse test's receiver uses it: a live counter, and a
        // stop flag that ends it before EOF.
        let (mut sender, receiver) = pair(Duration::from_secs(10));
        let total = 4usize << 20;
        let writer = std::thread::spawn(move || {
            sender.write_all(&vec![7u8; total]).unwrap();
            sender.shutdown(Shutdown::Write).unwrap();
            sender
        });
        let mut live = 0u64;
        let tally = read_until_eof(&receiver, 64 << 10, None, |n| live += n as u64).unwrap();
        drop(writer.join().unwrap());
        assert_eq!((tally.bytes, live), (total as u64, total as u64));
        assert!(tally.reads >= 64, "{} reads", tally.reads);

        let (_sender, receiver) = pair(Duration::from_secs(10));
        let stop = AtomicBool::new(true);
        let tally = read_until_eof(&receiver, 64 << 10, Some(&stop), |_| {}).unwrap();
        assert_eq!(
            (tally.bytes, tally.reads),
            (0, 0),
            "stopped before any read"
        );
    }
}
