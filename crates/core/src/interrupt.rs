//! Ctrl-C handling. The first SIGINT or SIGTERM only raises a flag: the
//! harness stops at the next sample, and the binary abandons the run without
//! storing anything. A second one exits at once; the store stays consistent
//! because a run is written in one SQLite transaction.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    if REQUESTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Install the handlers for SIGINT and SIGTERM.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only touches an atomic and calls _exit.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Whether the user asked to stop.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// The flag itself, for loops that take a `&AtomicBool` to stop on.
pub fn flag() -> &'static AtomicBool {
    &REQUESTED
}
