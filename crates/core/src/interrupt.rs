//! Stopping on a signal. The first SIGINT, SIGTERM or SIGHUP only raises a
//! flag: the harness stops at the next sample, servers stop accepting, and
//! the binary abandons the run without storing anything, removes what it
//! built and exits with 128 + the signal's number ([`exit_code`]: 130 for
//! Ctrl-C, 143 for SIGTERM, 129 for SIGHUP). A second one exits at once with
//! that code; the store stays consistent because a run is written in one
//! SQLite transaction, and namespaces die with the process anyway.
//!
//! A parent that runs a command (`osprobe link -- CMD`) passes the signal
//! on with [`forward_to`]: a terminal's Ctrl-C already reached the whole
//! foreground process group, but a `kill -TERM` or a hang-up sent to
//! osprobe alone did not reach the child.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
/// The first signal received (0 before any).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether the first signal came from a process (kill(2), si_code <= 0)
/// rather than from the kernel on behalf of a terminal.
static FROM_PROCESS: AtomicBool = AtomicBool::new(false);

/// The signals that stop osprobe like Ctrl-C.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if REQUESTED.swap(true, Ordering::SeqCst) {
        let first = SIGNAL.load(Ordering::SeqCst);
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + if first > 0 { first } else { signal }) };
    }
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    FROM_PROCESS.store(code <= 0, Ordering::SeqCst);
    SIGNAL.store(signal, Ordering::SeqCst);
}

/// Install the handlers for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    for signal in STOP_SIGNALS {
        // SAFETY: the handler only touches atomics and calls _exit; the
        // sigaction struct is fully initialised before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
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

/// The signal that asked to stop, if one did (a caller may also set the
/// flag itself, without a signal).
pub fn signal() -> Option<libc::c_int> {
    let s = SIGNAL.load(Ordering::SeqCst);
    (s > 0).then_some(s)
}

/// The exit code of an interrupted command: 128 + the signal, 130 (as for
/// Ctrl-C) when the stop came without a signal.
pub fn exit_code() -> u8 {
    signal().map_or(130, |s| (128 + s).clamp(0, 255) as u8)
}

/// Pass the stop signal on to a child process, unless the child has it
/// already: a terminal's SIGINT reached the whole foreground process group.
/// Returns the signal sent, if any.
pub fn forward_to(child: u32) -> Option<libc::c_int> {
    let signal = signal()?;
    let from_terminal = signal == libc::SIGINT && !FROM_PROCESS.load(Ordering::SeqCst);
    if from_terminal {
        return None;
    }
    let pid = libc::pid_t::try_from(child).ok().filter(|&p| p > 0)?;
    // SAFETY: kill(2) of a positive pid, the caller's own unreaped child.
    (unsafe { libc::kill(pid, signal) } == 0).then_some(signal)
}
