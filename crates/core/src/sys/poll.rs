//! Waiting for one descriptor to become readable or writable.
//!
//! `ppoll` rather than `poll`: its timeout has nanosecond resolution, so a
//! short remainder (a few hundred microseconds) neither becomes a busy
//! loop of zero-millisecond polls nor is stretched to a whole millisecond.

use std::io;
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// One `ppoll` on `fd` for `events`, up to `timeout`. Ok(true) when an
/// event (or an error or hang-up, which the next read or write reports) is
/// pending; Ok(false) on timeout, and also when a signal interrupted the
/// wait, so that a caller looping on a stop flag (Ctrl-C) sees it at once.
pub fn poll_one(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut entry = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = libc::timespec {
        // The field's time_t (musl's libc deprecates the type's name).
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as _,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec, both live locals for
    // the duration of the call; a null signal mask leaves the mask alone.
    let n = unsafe { libc::ppoll(&mut entry, 1, &ts, std::ptr::null()) };
    if n < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(err);
    }
    Ok(n > 0)
}

/// Wait until `fd` is readable (or has an error or hang-up), for the whole
/// of `timeout`: a wait interrupted by a signal resumes with the time
/// left. Ok(false) only when the time ran out.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

/// Like [`wait_readable`], for writing.
pub fn wait_writable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout)
}

fn wait_for(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if poll_one(fd, events, left)? {
            return Ok(true);
        }
        if left.is_zero() || Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn readable_only_once_bytes_wait() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        assert!(!wait_readable(fd, Duration::from_millis(20)).unwrap());
        assert!(!poll_one(fd, libc::POLLIN, Duration::ZERO).unwrap());
        a.write_all(b"x").unwrap();
        assert!(wait_readable(fd, Duration::from_secs(5)).unwrap());
        assert!(poll_one(fd, libc::POLLIN, Duration::ZERO).unwrap());
    }

    #[test]
    fn a_hang_up_counts_as_readable() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(wait_readable(b.as_raw_fd(), Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn writable_until_the_buffer_is_full() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(wait_writable(a.as_raw_fd(), Duration::from_secs(5)).unwrap());
        a.set_nonblocking(true).unwrap();
        let mut w = &a;
        while w.write(&[0u8; 65536]).is_ok() {}
        assert!(!wait_writable(a.as_raw_fd(), Duration::from_millis(20)).unwrap());
    }
}
