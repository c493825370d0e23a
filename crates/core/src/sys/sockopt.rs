//! Integer socket options (`setsockopt`/`getsockopt` with a C int), the
//! kind most options are: buffer sizes, flags, TCP_MAXSEG, TCP_NOTSENT_LOWAT.

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
}
