//! How a blocking read or write stays responsive: a short socket timeout
//! for the transfer, an idle limit, the stop flag, and progress reports.

use super::TransferError;
use std::io;
use std::net::TcpStream;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The progress callback is called after at least this many new bytes
/// (and once at the end), not after every 30-byte packet.
const PROGRESS_STEP: u64 = 256 * 1024;

pub(super) fn stop_requested(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || osprobe_core::interrupt::requested()
}

pub(super) fn peer_name(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "the peer".to_string())
}

/// A short socket timeout for the duration of a transfer; the caller's
/// timeout comes back when this is dropped.
pub(super) struct SliceTimeout<'a> {
    pub(super) stream: &'a TcpStream,
    pub(super) for_write: bool,
    pub(super) previous: Option<Duration>,
}

impl<'a> SliceTimeout<'a> {
    pub(super) fn set(stream: &'a TcpStream, for_write: bool, slice: Duration) -> io::Result<Self> {
        // A zero timeout means "none" to the kernel and is refused by std.
        let slice = slice.max(Duration::from_millis(1));
        let previous = if for_write {
            let previous = stream.write_timeout()?;
            stream.set_write_timeout(Some(slice))?;
            previous
        } else {
            let previous = stream.read_timeout()?;
            stream.set_read_timeout(Some(slice))?;
            previous
        };
        Ok(SliceTimeout {
            stream,
            for_write,
            previous,
        })
    }
}

impl Drop for SliceTimeout<'_> {
    fn drop(&mut self) {
        let _ = if self.for_write {
            self.stream.set_write_timeout(self.previous)
        } else {
            self.stream.set_read_timeout(self.previous)
        };
    }
}

/// Time since the last progress, against a limit.
pub(super) struct Idle {
    pub(super) limit: Duration,
    pub(super) since: Instant,
}

impl Idle {
    pub(super) fn new(limit: Duration) -> Idle {
        Idle {
            limit,
            since: Instant::now(),
        }
    }

    pub(super) fn progressed(&mut self) {
        self.since = Instant::now();
    }

    /// After a timed-out read or write: stop, give up, or wait again.
    pub(super) fn waited(&self, stop: &AtomicBool) -> Result<(), TransferError> {
        if stop_requested(stop) {
            return Err(TransferError::Interrupted);
        }
        if self.since.elapsed() >= self.limit {
            return Err(TransferError::TimedOut { after: self.limit });
        }
        Ok(())
    }
}

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Calls the progress callback every [`PROGRESS_STEP`] bytes and at the end.
pub(super) struct Progress<'a> {
    pub(super) callback: &'a mut dyn FnMut(u64),
    pub(super) reported: u64,
}

impl Progress<'_> {
    pub(super) fn update(&mut self, done: u64, finished: bool) {
        if finished || done - self.reported >= PROGRESS_STEP {
            (self.callback)(done);
            self.reported = done;
        }
    }
}

/// Whether the peer has already sent more bytes (without waiting for any).
pub(super) fn bytes_waiting(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: the buffer is one valid byte; MSG_PEEK leaves the data queued
    // and MSG_DONTWAIT makes the call return at once.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}
