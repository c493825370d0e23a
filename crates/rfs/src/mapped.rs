//! Read-only windows of files mapped into the server's memory, so that a
//! UDP read reply's data goes from the page cache into the datagram with
//! one copy (the kernel's, in `sendmsg`) instead of two (`pread` into a
//! buffer, then `sendto` out of it). TCP sends from the file with
//! sendfile; UDP would need each datagram corked across two system calls
//! (its header, then sendfile), where one `sendmmsg` sends a whole batch
//! of replies (and a socket may fall back to being shared by every worker,
//! which cannot hold a corked datagram).
//!
//! A window is [`WINDOW`] bytes of the file at a multiple of [`WINDOW`],
//! mapped whatever the file's size: pages past the end of the file are
//! never touched from user space. The kernel reads them on the server's
//! behalf inside `sendmsg`, where a page past the end (a file shrunk since
//! its size was read) makes the call fail with EFAULT instead of raising
//! SIGBUS; the caller then forgets the window and falls back to `pread`.
//!
//! Windows are keyed by the open file (`Arc<File>` identity), not by the
//! path: the service's descriptor cache hands out a fresh `File` once its
//! entry expires (after checking the path again), so a window is never
//! used past the lifetime of the descriptor it was made from. Each worker
//! keeps at most [`MAX_WINDOWS`] and drops those unused for [`IDLE`], so a
//! removed file's pages are not held for long.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of one window (and its alignment in the file).
pub(crate) const WINDOW: u64 = 64 << 20;
/// Windows one worker keeps at most.
pub(crate) const MAX_WINDOWS: usize = 8;
/// A window unused this long is unmapped.
pub(crate) const IDLE: Duration = Duration::from_secs(2);

/// One mapping of `WINDOW` bytes of `file` at `start`.
struct Window {
    file: Arc<File>,
    start: u64,
    base: *mut libc::c_void,
    last_used: Instant,
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: `base` is a mapping of WINDOW bytes made by mmap in
        // `FileWindows::map`, unmapped exactly once, here; no slice into
        // it outlives the borrow of the `FileWindows` that handed it out.
        unsafe { libc::munmap(self.base, WINDOW as usize) };
    }
}

/// A worker's mapped windows.
#[derive(Default)]
pub(crate) struct FileWindows {
    windows: Vec<Window>,
}

// SAFETY: the raw pointers are private mappings owned by the value; moving
// the value to another thread moves their ownership with it.
unsafe impl Send for FileWindows {}

impl FileWindows {
    /// `len` bytes of `file` at `offset` as mapped memory, or None when the
    /// range crosses a window boundary or the file cannot be mapped (the
    /// caller reads it instead). The bytes are for the kernel to copy
    /// (`sendmsg`), never to be read here: pages past the file's end fault.
    pub(crate) fn range(&mut self, file: &Arc<File>, offset: u64, len: usize) -> Option<Range> {
        let start = offset - offset % WINDOW;
        if len == 0 || offset + len as u64 > start + WINDOW {
            return None;
        }
        let i = match self
            .windows
            .iter()
            .position(|w| w.start == start && Arc::ptr_eq(&w.file, file))
        {
            Some(i) => i,
            None => self.map(file, start)?,
        };
        let w = &mut self.windows[i];
        w.last_used = Instant::now();
        let at = (offset - start) as usize;
        Some(Range {
            // SAFETY: `at + len <= WINDOW`, inside the mapping.
            ptr: unsafe { w.base.cast::<u8>().add(at) },
            len,
        })
    }

    /// Forget the window holding `offset` of `file` (its pages faulted:
    /// the file shrank).
    pub(crate) fn forget(&mut self, file: &Arc<File>, offset: u64) {
        let start = offset - offset % WINDOW;
        self.windows
            .retain(|w| !(w.start == start && Arc::ptr_eq(&w.file, file)));
    }

    /// Unmap the least recently used windows beyond [`MAX_WINDOWS`]. Not
    /// done by [`range`](FileWindows::range), so that the ranges handed
    /// out for one batch of replies all stay mapped until it is sent.
    pub(crate) fn trim(&mut self) {
        while self.windows.len() > MAX_WINDOWS {
            let oldest = (0..self.windows.len())
                .min_by_key(|&i| self.windows[i].last_used)
                .unwrap_or(0);
            self.windows.swap_remove(oldest);
        }
    }

    /// Unmap the windows unused for [`IDLE`].
    pub(crate) fn sweep(&mut self, now: Instant) {
        self.windows
            .retain(|w| now.saturating_duration_since(w.last_used) < IDLE);
    }

    /// Windows mapped now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.windows.len()
    }

    fn map(&mut self, file: &Arc<File>, start: u64) -> Option<usize> {
        let offset = libc::off_t::try_from(start).ok()?;
        // SAFETY: a fresh shared read-only mapping of an open descriptor;
        // the kernel picks the address. Nothing in this process writes
        // through it, and it is unmapped in Window's drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WINDOW as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        self.windows.push(Window {
            file: Arc::clone(file),
            start,
            base,
            last_used: Instant::now(),
        });
        Some(self.windows.len() - 1)
    }
}

/// Mapped bytes handed to the kernel: an address and a length, valid until
/// the [`FileWindows`] that made it is trimmed, swept or told to forget.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Range {
    pub ptr: *const u8,
    pub len: usize,
}

impl Range {
    /// As an iovec for `sendmsg` (which only reads through it).
    pub(crate) fn iovec(self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr as *mut libc::c_void,
            iov_len: self.len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp_io::{send_batch, Outgoing};
    use std::io;
    use std::net::UdpSocket;
    use std::os::unix::fs::FileExt;

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, Arc<File>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        let f = File::options().read(true).write(true).open(&path).unwrap();
        (dir, Arc::new(f))
    }

    /// Send `range` as one datagram from `tx` to `rx`: what arrived, or
    /// the send's error.
    fn send(range: Range, tx: &UdpSocket, rx: &UdpSocket) -> Result<Vec<u8>, io::Error> {
        let mut out = [Outgoing {
            to: rx.local_addr().unwrap(),
            parts: [range.iovec(), range.iovec()],
            count: 1,
        }];
        let mut error = None;
        // SAFETY: the range is of a window still mapped.
        unsafe { send_batch(tx, &mut out, |_, e| error = Some(e)) };
        if let Some(e) = error {
            return Err(e);
        }
        let mut buf = vec![0u8; 70_000];
        let n = rx.recv(&mut buf).unwrap();
        Ok(buf[..n].to_vec())
    }

    #[test]
    fn mapped_bytes_are_the_files_and_a_shrunk_file_is_an_error_not_a_signal() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
        let (_dir, f) = file_of(&data);
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut windows = FileWindows::default();
        let range = windows.range(&f, 1000, 32_768).unwrap();
        assert_eq!(send(range, &tx, &rx).unwrap(), &data[1000..33_768]);
        // The file shrinks under the mapping: its pages past the new end
        // fault inside the kernel's copy, which fails with EFAULT.
        f.set_len(100).unwrap();
        let range = windows.range(&f, 8192, 16_384).unwrap();
        let e = send(range, &tx, &rx).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        windows.forget(&f, 8192);
        assert_eq!(windows.len(), 0);
        // Grown again, the same offsets map and read the new bytes.
        f.write_all_at(&data, 0).unwrap();
        let range = windows.range(&f, 8192, 16_384).unwrap();
        assert_eq!(send(range, &tx, &rx).unwrap(), &data[8192..24_576]);
    }

    #[test]
    fn ranges_across_a_window_boundary_or_empty_are_not_mapped() {
        let (_dir, f) = file_of(b"x");
        let mut windows = FileWindows::default();
        assert!(windows.range(&f, WINDOW - 10, 20).is_none());
        assert!(windows.range(&f, 0, 0).is_none());
        assert!(windows.range(&f, WINDOW - 10, 10).is_some());
        assert!(windows.range(&f, WINDOW, 10).is_some());
        assert_eq!(windows.len(), 2);
    }

    #[test]
    fn windows_are_kept_per_open_file_bounded_and_dropped_when_idle() {
        let (_dir, f) = file_of(b"abc");
        let mut windows = FileWindows::default();
        // Another open of the same file (the descriptor cache's next
        // entry) gets a window of its own.
        let g = Arc::new(File::open(_dir.path().join("f")).unwrap());
        windows.range(&f, 0, 3).unwrap();
        windows.range(&f, 1, 2).unwrap();
        windows.range(&g, 0, 3).unwrap();
        assert_eq!(windows.len(), 2);
        // A batch may map more than the bound; trim brings it back,
        // keeping the most recently used.
        for i in 0..MAX_WINDOWS as u64 + 3 {
            windows.range(&f, i * WINDOW, 1).unwrap();
        }
        assert_eq!(windows.len(), MAX_WINDOWS + 4);
        windows.trim();
        assert_eq!(windows.len(), MAX_WINDOWS);
        let newest = MAX_WINDOWS as u64 + 2;
        assert!(windows
            .windows
            .iter()
            .any(|w| w.start == newest * WINDOW && Arc::ptr_eq(&w.file, &f)));
        windows.sweep(Instant::now() + IDLE);
        assert_eq!(windows.len(), 0);
    }
}
