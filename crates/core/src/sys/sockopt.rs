//! Integer socket options (`setsockopt`/`getsockopt` with a C int), the
//! kind most options are: buffer sizes, flags, TCP_MAXSEG, TCP_NOTSENT_LOWAT;
//! and socket buffers asked for past the system's cap where allowed
//! ([`force_buffers`]).

use std::io;
use std::os::unix::io::RawFd;

/// Set the integer option `name` at `level` of socket `fd` to `value`.
pub fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int for the duration of the call and its
    // exact size is passed; setsockopt does not keep the pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The integer option `name` at `level` of socket `fd`.
pub fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals valid for writes; `len`
    // holds `value`'s size, which the kernel never exceeds.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// Ask for `bytes` of receive and of send buffer on socket `fd`:
/// SO_RCVBUFFORCE / SO_SNDBUFFORCE where allowed (CAP_NET_ADMIN), which
/// pass net.core.rmem_max / wmem_max, else SO_RCVBUF / SO_SNDBUF, which the
/// kernel caps at them. A sender that must not wait on a small default
/// asks here; the error is the ordinary option's, when neither was taken.
pub fn force_buffers(fd: RawFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let mut outcome = Ok(());
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if set_int(fd, libc::SOL_SOCKET, force, value).is_err() {
            if let Err(e) = set_int(fd, libc::SOL_SOCKET, plain, value) {
                outcome = Err(e);
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn an_option_set_reads_back() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = socket.as_raw_fd();
        set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).unwrap();
        assert_eq!(
            get_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR).unwrap(),
            1
        );
        set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 0).unwrap();
        assert_eq!(
            get_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR).unwrap(),
            0
        );
        // The kernel doubles a buffer size for its bookkeeping.
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 64 << 10).unwrap();
        assert!(get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap() >= 64 << 10);
    }

    #[test]
    fn errors_come_from_the_kernel() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        // TCP options on a UDP socket.
        let e = get_int(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
        let e = set_int(-1, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }

    /// The system's cap on the ordinary option, e.g. net.core.rmem_max.
    fn cap(name: &str) -> usize {
        let path = format!("/proc/sys/net/core/{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        text.trim().parse().unwrap()
    }

    #[test]
    fn forced_buffers_pass_the_cap_where_allowed() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = socket.as_raw_fd();
        let (rmem_max, wmem_max) = (cap("rmem_max"), cap("wmem_max"));
        // Twice the larger cap (bounded, should a cap be huge): only the
        // forcing options can grant it.
        let asked = (2 * rmem_max.max(wmem_max)).min(1 << 28);
        force_buffers(fd, asked).unwrap();
        let read = |name| get_int(fd, libc::SOL_SOCKET, name).unwrap() as usize;
        // The kernel reports twice what it was asked (its bookkeeping).
        if crate::sys::is_root() {
            assert!(
                read(libc::SO_RCVBUF) >= 2 * asked,
                "{}",
                read(libc::SO_RCVBUF)
            );
            assert!(
                read(libc::SO_SNDBUF) >= 2 * asked,
                "{}",
                read(libc::SO_SNDBUF)
            );
        } else {
            assert_eq!(read(libc::SO_RCVBUF), 2 * asked.min(rmem_max));
            assert_eq!(read(libc::SO_SNDBUF), 2 * asked.min(wmem_max));
        }
        let e = force_buffers(-1, 1 << 20).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
}
