//! The timers a user-space network stack actually has, for time.sleep's
//! `timer` parameter (seed 001's second table: a timer emulated on a green
//! thread, on a native thread, ...). One sample is one timer: the stack's
//! thread asks for a wake-up at a deadline and blocks until its timer says
//! so; the error is when the stack's thread runs again minus the deadline.
//!
//! - `tokio`: a current-thread tokio runtime on the stack's thread and
//!   `tokio::time::sleep_until`. Tokio's timer wheel counts whole
//!   milliseconds (a deadline is rounded up to the next millisecond tick)
//!   and the runtime parks in epoll_wait with a millisecond timeout, so a
//!   timer is late by up to a millisecond by design.
//! - `timerfd`: a dedicated native timer thread blocked in read(2) on one
//!   timerfd armed with the absolute deadline; when it expires, the timer
//!   thread writes an eventfd the stack's thread is blocked on. Two
//!   wake-ups per timer (the timer thread's, then the stack thread's),
//!   each an hrtimer or futex path of the kernel, no millisecond rounding.
//! - `hybrid`: the stack's thread runs the tokio runtime (as an async stack
//!   would), but its timer is the dedicated timerfd thread, which wakes the
//!   runtime through a `tokio::sync::Notify` (the runtime's own unpark):
//!   the runtime's executor with a nanosecond timer instead of its wheel.

use osprobe_core::clock::monotonic_ns;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The `timer` values, by parameter name.
pub const TIMERS: &[&str] = &["tokio", "timerfd", "hybrid"];

/// Which timer a stack uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackTimer {
    Tokio,
    TimerfdThread,
    Hybrid,
}

impl StackTimer {
    pub fn named(name: &str) -> Option<StackTimer> {
        Some(match name {
            "tokio" => StackTimer::Tokio,
            "timerfd" => StackTimer::TimerfdThread,
            "hybrid" => StackTimer::Hybrid,
            _ => return None,
        })
    }

    /// The metric's name: distinct from time.sleep's strategies of the same
    /// words (`timerfd`, `hybrid` there sleep on the measuring thread).
    pub fn metric(self) -> &'static str {
        match self {
            StackTimer::Tokio => "tokio_sleep",
            StackTimer::TimerfdThread => "timerfd_thread",
            StackTimer::Hybrid => "tokio_woken_by_timerfd",
        }
    }

    pub fn note(self) -> &'static str {
        match self {
            StackTimer::Tokio => "timer=tokio: a current-thread tokio runtime on this thread, tokio::time::sleep_until (its timer wheel counts whole milliseconds: a deadline is rounded up to the next 1 ms tick, and the runtime parks in epoll_wait with a millisecond timeout)",
            StackTimer::TimerfdThread => "timer=timerfd: a dedicated native timer thread blocked in read(2) on one timerfd armed with the absolute deadline (TFD_TIMER_ABSTIME), which then writes an eventfd this thread is blocked on: two wake-ups per timer",
            StackTimer::Hybrid => "timer=hybrid: a current-thread tokio runtime on this thread awaiting a tokio::sync::Notify, which the dedicated timerfd thread signals at the deadline: tokio's executor with a nanosecond timer instead of its millisecond wheel",
        }
    }
}

/// A timer set up once per point and used for every sample.
pub struct Rig {
    kind: StackTimer,
    runtime: Option<tokio::runtime::Runtime>,
    thread: Option<TimerThread>,
    eventfd: Option<Arc<OwnedFd>>,
    notify: Option<Arc<tokio::sync::Notify>>,
}

impl Rig {
    /// `slack_ns`: the timer slack the timer thread takes (the measuring
    /// thread's, so both wake alike).
    pub fn new(kind: StackTimer, slack_ns: Option<u64>) -> io::Result<Rig> {
        let runtime = match kind {
            StackTimer::Tokio | StackTimer::Hybrid => Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()?,
            ),
            StackTimer::TimerfdThread => None,
        };
        let mut rig = Rig {
            kind,
            runtime,
            thread: None,
            eventfd: None,
            notify: None,
        };
        match kind {
            StackTimer::Tokio => {}
            StackTimer::TimerfdThread => {
                let eventfd = Arc::new(new_eventfd()?);
                let for_thread = eventfd.clone();
                rig.thread = Some(TimerThread::start(
                    slack_ns,
                    Box::new(move || write_eventfd(&for_thread)),
                )?);
                rig.eventfd = Some(eventfd);
            }
            StackTimer::Hybrid => {
                let notify = Arc::new(tokio::sync::Notify::new());
                let for_thread = notify.clone();
                rig.thread = Some(TimerThread::start(
                    slack_ns,
                    Box::new(move || for_thread.notify_one()),
                )?);
                rig.notify = Some(notify);
            }
        }
        Ok(rig)
    }

    /// Block this thread until the timer fires for `deadline_ns`
    /// (CLOCK_MONOTONIC); returns the clock when this thread runs again.
    pub fn sleep_until(&mut self, deadline_ns: u64) -> io::Result<u64> {
        match self.kind {
            StackTimer::Tokio => {
                let runtime = self.runtime.as_ref().expect("built for tokio");
                // The deadline as tokio's Instant: both clocks are
                // CLOCK_MONOTONIC, read back to back.
                let now_ns = monotonic_ns();
                let now = tokio::time::Instant::now();
                let at = now + Duration::from_nanos(deadline_ns.saturating_sub(now_ns));
                // Made inside the runtime: a Sleep registers with its timer.
                runtime.block_on(async move { tokio::time::sleep_until(at).await });
            }
            StackTimer::TimerfdThread => {
                self.thread.as_ref().expect("started").arm(deadline_ns)?;
                read_eventfd(self.eventfd.as_ref().expect("made"))?;
            }
            StackTimer::Hybrid => {
                self.thread.as_ref().expect("started").arm(deadline_ns)?;
                let notify = self.notify.as_ref().expect("made").clone();
                let runtime = self.runtime.as_ref().expect("built for hybrid");
                runtime.block_on(notify.notified());
            }
        }
        Ok(monotonic_ns())
    }
}

/// The dedicated timer thread: takes deadlines, arms its timerfd, blocks
/// in read(2) until it expires, then calls `fire`.
struct TimerThread {
    deadlines: Option<mpsc::Sender<u64>>,
    handle: Option<JoinHandle<()>>,
}

impl TimerThread {
    fn start(slack_ns: Option<u64>, mut fire: Box<dyn FnMut() + Send>) -> io::Result<TimerThread> {
        // SAFETY: no memory preconditions; checked below.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor this thread owns.
        let timerfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let (tx, rx) = mpsc::channel::<u64>();
        let handle = std::thread::Builder::new()
            .name("osprobe-timerfd".into())
            .spawn(move || {
                if let Some(ns) = slack_ns {
                    // SAFETY: changes this thread's slack only; no pointer.
                    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
                }
                // Ends when the rig drops its sender.
                while let Ok(deadline) = rx.recv() {
                    if arm_and_wait(&timerfd, deadline).is_err() {
                        // The stack thread would wait forever: fire anyway;
                        // the lateness it records is then not a timer's.
                    }
                    fire();
                }
            })?;
        Ok(TimerThread {
            deadlines: Some(tx),
            handle: Some(handle),
        })
    }

    fn arm(&self, deadline_ns: u64) -> io::Result<()> {
        self.deadlines
            .as_ref()
            .expect("live until drop")
            .send(deadline_ns)
            .map_err(|_| io::Error::other("the timer thread ended"))
    }
}

impl Drop for TimerThread {
    fn drop(&mut self) {
        drop(self.deadlines.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

fn arm_and_wait(timerfd: &OwnedFd, deadline_ns: u64) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: timespec(0),
        // Zero would disarm: a deadline is never 0 on CLOCK_MONOTONIC.
        it_value: timespec(deadline_ns.max(1)),
    };
    // SAFETY: spec is valid; TFD_TIMER_ABSTIME makes it absolute (a past
    // deadline expires at once).
    let rc = unsafe {
        libc::timerfd_settime(
            timerfd.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    read_u64(timerfd).map(|_| ())
}

fn new_eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no memory preconditions; checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn write_eventfd(fd: &OwnedFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one`; an eventfd cannot overflow at
    // one write per timer.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

fn read_eventfd(fd: &OwnedFd) -> io::Result<()> {
    read_u64(fd).map(|_| ())
}

/// A blocking 8-byte read (timerfd expirations, eventfd counter).
fn read_u64(fd: &OwnedFd) -> io::Result<u64> {
    let mut value = 0u64;
    loop {
        // SAFETY: reads 8 bytes into `value`.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(value);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_timer_wakes_the_thread_no_sooner_than_its_deadline() {
        for name in TIMERS {
            let kind = StackTimer::named(name).unwrap();
            let mut rig = Rig::new(kind, None).unwrap();
            for _ in 0..20 {
                let deadline = monotonic_ns() + 200_000;
                let woke = rig.sleep_until(deadline).unwrap();
                assert!(woke >= deadline, "{name} woke {} ns early", deadline - woke);
            }
        }
    }

    #[test]
    fn a_past_deadline_returns_at_once() {
        for name in TIMERS {
            let mut rig = Rig::new(StackTimer::named(name).unwrap(), None).unwrap();
            let deadline = monotonic_ns().saturating_sub(1_000_000);
            assert!(rig.sleep_until(deadline).unwrap() >= deadline);
        }
    }

    #[test]
    fn names_and_metrics_are_distinct() {
        assert!(StackTimer::named("wheel").is_none());
        let metrics: Vec<_> = TIMERS
            .iter()
            .map(|n| StackTimer::named(n).unwrap().metric())
            .collect();
        for m in &metrics {
            assert_eq!(metrics.iter().filter(|x| x == &m).count(), 1);
        }
    }
}
