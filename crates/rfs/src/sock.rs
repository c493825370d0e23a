//! Small socket helpers shared by the server, the client and the relay.

use std::time::Duration;

/// Whether `fd` becomes readable within `timeout` (false as well when a
/// signal cut the wait short, or on an error, which the next read reports).
pub fn wait_readable(fd: libc::c_int, timeout: Duration) -> bool {
    osprobe_core::sys::poll_one(fd, libc::POLLIN, timeout).unwrap_or(false)
}
