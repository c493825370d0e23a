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
            // SAFETY: `v` is a c_int that outlives the call and its size is
            // passed; setsockopt does not keep the pointer.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// Whether `fd` becomes readable within `timeout`.
pub fn wait_readable(fd: libc::c_int, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd that outlives the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
    rc > 0
}
