//! Small socket helpers shared by the server, the client and the relay.

use std::time::Duration;

/// Ask for `bytes` of send and receive buffer: SO_*BUFFORCE when allowed
/// (root), else the ordinary options (capped by net.core.[rw]mem_max).
pub fn set_buffers(fd: libc::c_int, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            if osprobe_core::sys::set_int(fd, libc::SOL_SOCKET, opt, v).is_ok() {
                break;
            }
        }
    }
}

/// Whether `fd` becomes readable within `timeout` (false as well when a
/// signal cut the wait short, or on an error, which the next read reports).
pub fn wait_readable(fd: libc::c_int, timeout: Duration) -> bool {
    osprobe_core::sys::poll_one(fd, libc::POLLIN, timeout).unwrap_or(false)
}
