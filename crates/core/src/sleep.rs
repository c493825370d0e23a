//! Ways to wait until a moment on CLOCK_MONOTONIC, and what each costs in
//! accuracy. The BBR talk (slide 5.8) found that a user-space stack's timers
//! decide whether BBR works: a plain sleep wakes tens of microseconds late
//! (timer slack, the scheduler, a halted vCPU), spinning is exact but burns
//! a CPU, and a hybrid sleeps until shortly before the deadline and spins
//! the rest. `time.sleep` measures each; the link emulator uses the hybrid.
//!
//! Every strategy takes an absolute deadline in CLOCK_MONOTONIC nanoseconds
//! (see [`crate::clock::monotonic_ns`]), so callers that release many
//! events do not accumulate drift.

use crate::clock::monotonic_ns;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// How to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// nanosleep(2) for the time left (relative: wakes late by the time
    /// spent computing it, plus slack).
    Nanosleep,
    /// clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): no drift from
    /// computing the interval.
    ClockNanosleepAbs,
    /// A timerfd armed with the absolute deadline, then read(2).
    Timerfd,
    /// epoll_wait with a millisecond timeout, then nanosleep for the rest
    /// (what an event loop with a ms-resolution timeout gets).
    Epoll,
    /// Read the clock until the deadline: exact, one CPU busy.
    Spin,
    /// clock_nanosleep until `spin` plus the thread's timer slack before
    /// the deadline, then spin. The kernel may end a normal thread's sleep
    /// up to its timer slack (50 us by default) late, so a margin of `spin`
    /// alone would be overrun by the slack; real-time threads have no
    /// slack applied and only spin a little longer than needed.
    Hybrid { spin: Duration },
}

impl Strategy {
    /// The hybrid with the spin margin the link emulator uses: long enough
    /// to absorb a typical late wake-up on a VM (tens of microseconds).
    pub const HYBRID_DEFAULT: Strategy = Strategy::Hybrid {
        spin: Duration::from_micros(50),
    };

    /// The name `time.sleep` uses as its metric.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Nanosleep => "nanosleep",
            Strategy::ClockNanosleepAbs => "clock_nanosleep_abs",
            Strategy::Timerfd => "timerfd",
            Strategy::Epoll => "epoll",
            Strategy::Spin => "spin",
            Strategy::Hybrid { .. } => "hybrid",
        }
    }
}

/// Wait until CLOCK_MONOTONIC reaches `deadline_ns` (returns at once if it
/// has passed). Returns the clock when the wait ended.
pub fn sleep_until(strategy: Strategy, deadline_ns: u64) -> io::Result<u64> {
    match strategy {
        Strategy::Nanosleep => {
            let now = monotonic_ns();
            if deadline_ns > now {
                relative_nanosleep(deadline_ns - now);
            }
        }
        Strategy::ClockNanosleepAbs => absolute_nanosleep(deadline_ns),
        Strategy::Timerfd => timerfd_sleep(deadline_ns)?,
        Strategy::Epoll => epoll_sleep(deadline_ns)?,
        Strategy::Spin => spin_until(deadline_ns),
        Strategy::Hybrid { spin } => {
            let slack = timer_slack().unwrap_or(Duration::ZERO);
            let margin = (spin + slack).as_nanos() as u64;
            let wake = deadline_ns.saturating_sub(margin);
            if wake > monotonic_ns() {
                absolute_nanosleep(wake);
            }
            spin_until(deadline_ns);
        }
    }
    Ok(monotonic_ns())
}

/// Busy-wait on the clock.
pub fn spin_until(deadline_ns: u64) {
    while monotonic_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as _, // the field's time_t (musl's libc deprecates the name)
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

fn relative_nanosleep(ns: u64) {
    let mut request = timespec(ns);
    let mut remaining = timespec(0);
    // SAFETY: both timespecs are valid for the call; EINTR resumes with
    // what is left.
    while unsafe { libc::nanosleep(&request, &mut remaining) } != 0 {
        request = remaining;
    }
}

fn absolute_nanosleep(deadline_ns: u64) {
    let deadline = timespec(deadline_ns);
    loop {
        // SAFETY: a valid timespec; an absolute sleep is simply repeated
        // after a signal.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &deadline,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

fn timerfd_sleep(deadline_ns: u64) -> io::Result<()> {
    if deadline_ns <= monotonic_ns() {
        return Ok(());
    }
    // SAFETY: timerfd_create has no memory preconditions; checked below.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let spec = libc::itimerspec {
        it_interval: timespec(0),
        it_value: timespec(deadline_ns),
    };
    // SAFETY: spec is valid; TFD_TIMER_ABSTIME makes it_value absolute.
    let rc = unsafe {
        libc::timerfd_settime(
            fd.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut expirations = 0u64;
    loop {
        // SAFETY: reads 8 bytes into `expirations`.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut expirations as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn epoll_sleep(deadline_ns: u64) -> io::Result<()> {
    // SAFETY: epoll_create1 has no memory preconditions; checked below.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut event = libc::epoll_event { events: 0, u64: 0 };
    loop {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return Ok(());
        }
        // epoll_wait's timeout is in whole milliseconds; round up, as an
        // event loop waiting "at least" the interval would.
        let ms = (deadline_ns - now).div_ceil(1_000_000).min(i32::MAX as u64) as i32;
        // SAFETY: an empty epoll set; `event` has room for one event.
        let rc = unsafe { libc::epoll_wait(fd.as_raw_fd(), &mut event, 1, ms) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// The calling thread's timer slack (PR_GET_TIMERSLACK), which the kernel
/// adds to every sleep of a normal-priority thread.
pub fn timer_slack() -> Option<Duration> {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments.
    let ns = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    (ns >= 0).then(|| Duration::from_nanos(ns as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Strategy; 6] = [
        Strategy::Nanosleep,
        Strategy::ClockNanosleepAbs,
        Strategy::Timerfd,
        Strategy::Epoll,
        Strategy::Spin,
        Strategy::HYBRID_DEFAULT,
    ];

    #[test]
    fn no_strategy_wakes_early() {
        for strategy in ALL {
            for delay_us in [1u64, 100, 2_000] {
                let deadline = monotonic_ns() + delay_us * 1_000;
                let woke = sleep_until(strategy, deadline).unwrap();
                assert!(woke >= deadline, "{} woke early", strategy.name());
            }
        }
    }

    #[test]
    fn a_past_deadline_returns_at_once() {
        for strategy in ALL {
            let before = monotonic_ns();
            sleep_until(strategy, before.saturating_sub(1_000_000)).unwrap();
            // Generous: returning "at once" must not mean sleeping a tick.
            assert!(monotonic_ns() - before < 50_000_000, "{}", strategy.name());
        }
    }

    #[test]
    fn names_are_the_metric_names() {
        let names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "nanosleep",
                "clock_nanosleep_abs",
                "timerfd",
                "epoll",
                "spin",
                "hybrid"
            ]
        );
    }

    #[test]
    fn timer_slack_is_readable() {
        assert!(timer_slack().is_some());
    }
}
