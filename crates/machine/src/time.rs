//! time.sleep and time.timers: how late a thread wakes from a timed sleep,
//! and how late the timer service's callbacks fire (docs/methods.md;
//! the BBR talk slides 5.6-5.9, the SOS design document section 2).
//!
//! time.sleep. One sample is one sleep: read CLOCK_MONOTONIC, sleep with
//! a strategy of [`osprobe_core::sleep`] until that time plus `requested`
//! microseconds, read the clock again; the wake-up error is the second
//! reading minus the deadline. It is what cyclictest calls latency and what
//! the BBR talk plotted as "expiration - scheduled". Traps:
//!
//! - Timer slack. The kernel may defer a normal thread's wake-up by its
//!   timer slack (50 us by default) to batch timer interrupts, so a plain
//!   sleep is late by tens of microseconds however good the clock is. The
//!   slack is reported; it does not apply to real-time threads, and
//!   `slack_ns` sets it for one point (PR_SET_TIMERSLACK, restored after).
//!   The hybrid's spin margin must exceed the slack plus the scheduler's
//!   wake-up latency, or the hybrid is late by the difference.
//! - The scheduler. A woken thread still has to be scheduled; on a VM a
//!   halted vCPU must be woken by the host first. `policy=fifo` measures
//!   what cyclictest measures (SCHED_FIFO priority 80 and mlockall, as
//!   `cyclictest -p 80 -m`); it needs root and is undone after the point.
//! - Zero errors. Spinning can end on the very nanosecond of the deadline;
//!   the histogram's bins are logarithmic, so exact hits are counted in a
//!   note instead of a bin.
//! - epoll_wait's timeout is in whole milliseconds: an event loop that
//!   waits "at least" the interval oversleeps short sleeps by up to 1 ms.
//! - The timerfd and epoll strategies create and close their descriptor
//!   on every sleep; that cost counts in their error, and a request
//!   shorter than the set-up does not sleep at all.
//! - Spinning is exact but burns a CPU; every point reports the CPU time
//!   the sleeping thread used (getrusage RUSAGE_THREAD) per wall time.
//!
//! time.timers. Registers `timers` callbacks with the timer service
//! ([`osprobe_core::timers::TimerService`], at most `timers` pending),
//! each due a seeded-random 1 ms .. window after its registration, and
//! records how late each fires (the service passes due and actual time).
//! Rounds repeat within the profile's time budget. It also reports the cost
//! of one registration and the share of timers that fired. With
//! `mode=absolute` or `mode=rearm` the timers are periodic instead, and the
//! point measures their drift over `periods` periods ([`crate::heartbeat`]).

use crate::error::RealtimeError;
use osprobe_core::clock::monotonic_ns;
use osprobe_core::model::Histogram;
use osprobe_core::random::SplitMix64;
use osprobe_core::sleep::{sleep_until, timer_slack, Strategy};
use osprobe_core::timers::{Fired, Rearm, TimerId, TimerService, When};
use osprobe_core::{
    Context, Experiment, ExperimentError, Harness, Measurement, ParamKind, ParamSpec, Params,
    Profile, Registry, Samples, Summary, Unit,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::heartbeat;

/// Add the time.* experiments.
pub fn register(registry: &mut Registry) {
    registry.register(Box::new(Sleep));
    registry.register(Box::new(Timers));
}

/// The strategies of time.sleep, by metric name.
const STRATEGIES: &[&str] = &[
    "nanosleep",
    "clock_nanosleep_abs",
    "timerfd",
    "epoll",
    "spin",
    "hybrid",
];

const POLICIES: &[&str] = &["other", "fifo"];

/// cyclictest's usual priority for a latency test (`-p 80`).
const FIFO_PRIORITY: libc::c_int = 80;

/// Bins of the wake-up error histograms.
const HISTOGRAM_BINS: usize = 30;

fn strategy_named(name: &str) -> Option<Strategy> {
    Some(match name {
        "nanosleep" => Strategy::Nanosleep,
        "clock_nanosleep_abs" => Strategy::ClockNanosleepAbs,
        "timerfd" => Strategy::Timerfd,
        "epoll" => Strategy::Epoll,
        "spin" => Strategy::Spin,
        "hybrid" => Strategy::HYBRID_DEFAULT,
        _ => return None,
    })
}

/// What a strategy does, for the notes.
fn strategy_note(strategy: Strategy) -> String {
    match strategy {
        Strategy::Nanosleep => {
            "nanosleep(2) for the interval left, computed from the clock just before the call"
                .into()
        }
        Strategy::ClockNanosleepAbs => {
            "clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to the deadline".into()
        }
        Strategy::Timerfd => {
            "a timerfd armed with the absolute deadline, then read(2); the descriptor is created and closed per sleep, which counts in the error (a request shorter than that does not sleep)".into()
        }
        Strategy::Epoll => {
            "epoll_wait with the interval rounded up to whole milliseconds, as an event loop does; the epoll descriptor is created and closed per sleep, which counts in the error".into()
        }
        Strategy::Spin => "reads CLOCK_MONOTONIC until the deadline (one CPU busy)".into(),
        Strategy::Hybrid { spin } => format!(
            "clock_nanosleep(TIMER_ABSTIME) until {} us plus the thread's timer slack ({}) before the deadline, then spins",
            spin.as_micros(),
            osprobe_core::sleep::timer_slack()
                .map_or("unknown".to_string(), |s| format!("{} ns", s.as_nanos()))
        ),
    }
}

/// The error for a bad parameter value: names it and what is accepted.
fn bad_param(name: &'static str, value: impl std::fmt::Display, accepted: &str) -> ExperimentError {
    crate::error::bad_value(name, value, accepted)
}

/// CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    osprobe_core::sys::thread_cpu_time().as_nanos() as u64
}

/// CPU time of the whole process, in nanoseconds.
fn process_cpu_ns() -> u64 {
    osprobe_core::sys::process_cpu_time().as_nanos() as u64
}

/// The timer slack of this thread, for the notes.
fn slack_note(realtime: bool) -> String {
    let slack = match timer_slack() {
        Some(s) if s.as_nanos() < 1_000 => format!("{} ns", s.as_nanos()),
        Some(s) => format!("{} us", s.as_nanos() as f64 / 1e3),
        None => "unknown".into(),
    };
    if realtime {
        format!("timer slack of this thread: {slack} (not applied to SCHED_FIFO threads)")
    } else {
        format!(
            "timer slack of this thread: {slack} (the kernel may defer each wake-up by up to this)"
        )
    }
}

/// Count and describe errors of exactly 0 ns, which a log-spaced histogram
/// cannot hold.
fn zero_note(samples: &[f64]) -> Option<String> {
    let zeros = samples.iter().filter(|&&x| x == 0.0).count();
    (zeros > 0).then(|| {
        format!(
            "{zeros} of {} samples exactly on time (0 ns): not in the logarithmic histogram",
            samples.len()
        )
    })
}

/// SCHED_FIFO and locked memory for the calling thread while it lives:
/// cyclictest's `-p 80 -m`. Dropping it restores the thread's previous
/// policy and priority and unlocks memory.
struct Realtime {
    policy: libc::c_int,
    param: libc::sched_param,
}

impl Realtime {
    fn enter(priority: libc::c_int) -> Result<Realtime, RealtimeError> {
        let failed = |call: String| move |source| RealtimeError { call, source };
        let policy = sched::policy().map_err(failed("sched_getscheduler".into()))?;
        let param = sched::param().map_err(failed("sched_getparam".into()))?;
        // Locked first, so that no page fault happens once real-time.
        // SAFETY: mlockall takes flags only.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            return Err(failed("mlockall".into())(std::io::Error::last_os_error()));
        }
        let fifo = sched_param(priority);
        if let Err(err) = sched::set(libc::SCHED_FIFO, &fifo) {
            // SAFETY: undoes the mlockall above.
            unsafe { libc::munlockall() };
            return Err(failed(format!(
                "sched_setscheduler(SCHED_FIFO, {priority})"
            ))(err));
        }
        Ok(Realtime { policy, param })
    }
}

impl Drop for Realtime {
    fn drop(&mut self) {
        // Restores what sched::policy and sched::param read for this same
        // thread; nothing more can be done if the kernel refuses.
        let _ = sched::set(self.policy, &self.param);
        // SAFETY: munlockall takes no arguments.
        unsafe { libc::munlockall() };
    }
}

/// The calling thread's timer slack set to a value while it lives, the
/// previous one restored on drop.
struct SlackGuard {
    previous: libc::c_ulong,
}

impl SlackGuard {
    fn set(ns: u64) -> Result<SlackGuard, ExperimentError> {
        let previous = timer_slack().ok_or_else(|| {
            ExperimentError::last_os("reading the timer slack (PR_GET_TIMERSLACK)")
        })?;
        set_timer_slack(ns as libc::c_ulong)
            .map_err(|e| ExperimentError::io(format!("setting the timer slack to {ns} ns"), e))?;
        Ok(SlackGuard {
            previous: previous.as_nanos() as libc::c_ulong,
        })
    }
}

impl Drop for SlackGuard {
    fn drop(&mut self) {
        let _ = set_timer_slack(self.previous);
    }
}

fn set_timer_slack(ns: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes a value, no pointer; it changes the
    // calling thread only.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// time.sleep: the wake-up error of one strategy at one requested delay.
pub struct Sleep;

impl Sleep {
    /// The grid points of one policy.
    fn points(strategies: &[&str], requested: &[i64], policy: &str) -> Vec<Params> {
        let mut points = Vec::new();
        for s in strategies {
            for &r in requested {
                points.push(
                    Params::new()
                        .with("strategy", *s)
                        .with("requested", r)
                        .with("policy", policy),
                );
            }
        }
        points
    }

    /// The grid points of the user-space stack's timers (policy other).
    fn timer_points(requested: &[i64]) -> Vec<Params> {
        let mut points = Vec::new();
        for t in crate::stack_timer::TIMERS {
            for &r in requested {
                points.push(
                    Params::new()
                        .with("timer", *t)
                        .with("requested", r)
                        .with("policy", "other"),
                );
            }
        }
        points
    }
}

/// The most sleeps one point keeps (16 MB of samples), also with
/// `duration_ms`.
const MAX_SLEEPS: usize = 2_000_000;

impl Experiment for Sleep {
    fn id(&self) -> &'static str {
        "time.sleep"
    }
    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("policy=fifo (SCHED_FIFO and mlockall)"),
            ..osprobe_core::Requirements::default()
        }
    }

    /// `requested` is in microseconds.
    fn plot_view(&self) -> osprobe_core::plot_view::PlotView {
        osprobe_core::plot_view::PlotView {
            param_units: &[("requested", osprobe_core::Unit::Nanoseconds, 1e3)],
            ..Default::default()
        }
    }

    fn description(&self) -> &'static str {
        "wake-up error of a timed sleep (actual minus requested wake time): nanosleep, clock_nanosleep TIMER_ABSTIME, timerfd, epoll_wait, spin and the hybrid; optionally SCHED_FIFO + mlockall (cyclictest's method)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "strategy",
                help: "how to sleep (each is also the metric's name)",
                kind: ParamKind::Choice(STRATEGIES),
            },
            ParamSpec {
                name: "requested",
                help: "the requested sleep, in microseconds",
                kind: ParamKind::Int {
                    min: 1,
                    max: 1_000_000,
                },
            },
            ParamSpec {
                name: "policy",
                help: "scheduling: other (normal) or fifo (SCHED_FIFO priority 80 and mlockall, as cyclictest -p 80 -m; needs root)",
                kind: ParamKind::Choice(POLICIES),
            },
            ParamSpec {
                name: "slack_ns",
                help: "set this thread's timer slack for the point (PR_SET_TIMERSLACK), in ns; default: leave it (50 us for a normal thread)",
                kind: ParamKind::Int {
                    min: 1,
                    max: 1_000_000_000,
                },
            },
            ParamSpec {
                name: "timer",
                help: "instead of sleeping itself by `strategy`, wait on a user-space stack's timer: tokio (a current-thread runtime's sleep, 1 ms wheel), timerfd (a dedicated timer thread on a timerfd that wakes this one), hybrid (the tokio runtime woken by the timerfd thread); the metric is tokio_sleep, timerfd_thread or tokio_woken_by_timerfd",
                kind: ParamKind::Choice(crate::stack_timer::TIMERS),
            },
            ParamSpec {
                name: "duration_ms",
                help: "sleep for this long per point instead of the profile's budget (for benchmarks)",
                kind: ParamKind::Int {
                    min: 1,
                    max: 600_000,
                },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        match profile {
            Profile::Smoke => {
                let mut points = Sleep::points(STRATEGIES, &[100], "other");
                points.extend(Sleep::points(&["hybrid"], &[100], "fifo"));
                points.extend(Sleep::timer_points(&[100]));
                points
            }
            Profile::Quick => {
                let mut points = Sleep::points(STRATEGIES, &[1, 10, 100, 1_000, 10_000], "other");
                // What real-time scheduling, or a normal thread without timer
                // slack, buys at the benchmark's delay.
                points.extend(Sleep::points(
                    &["clock_nanosleep_abs", "hybrid"],
                    &[100],
                    "fifo",
                ));
                for point in Sleep::points(&["clock_nanosleep_abs", "hybrid"], &[100], "other") {
                    points.push(point.with("slack_ns", 1));
                }
                // A user-space stack's timers beside the strategies (seed 001).
                points.extend(Sleep::timer_points(&[100, 1_000, 10_000]));
                points
            }
            Profile::Full => {
                let requested = [1, 3, 10, 30, 100, 300, 1_000, 3_000, 10_000];
                let mut points = Sleep::points(STRATEGIES, &requested, "other");
                points.extend(Sleep::points(STRATEGIES, &requested, "fifo"));
                points.extend(Sleep::timer_points(&requested));
                points
            }
        }
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let waiting = Waiting::from_params(params)?;
        let realtime = enter_policy(params)?;
        let slack = match params.int("slack_ns") {
            None => None,
            Some(ns) if (1..=1_000_000_000).contains(&ns) => Some(SlackGuard::set(ns as u64)?),
            Some(ns) => return Err(bad_param("slack_ns", ns, "1 to 1000000000 (ns)")),
        };
        // Read while the policy and slack of the point are in force.
        let slack_note = slack_note(realtime.is_some());
        let harness = sleep_harness(ctx, params)?;
        let slept = waiting.sample(harness)?;
        let scheduling = if realtime.is_some() {
            format!("scheduling: SCHED_FIFO priority {FIFO_PRIORITY}, memory locked (mlockall), as cyclictest -p {FIFO_PRIORITY} -m; restored afterwards")
        } else {
            "scheduling: SCHED_OTHER (normal), memory not locked, thread not pinned".to_string()
        };
        drop(slack);
        drop(realtime);
        let mut m = waiting.measurement(self.id(), params, &slept)?;
        m.notes.push(slack_note);
        m.notes.push(scheduling);
        m.notes.push(format!(
            "CPU time of the sleeping thread: {:.0}% of the wall time (RUSAGE_THREAD)",
            slept.cpu_share * 100.0
        ));
        m.notes.push(format!(
            "clocksource: {}",
            if ctx.environment.clocksource.is_empty() {
                "unknown"
            } else {
                &ctx.environment.clocksource
            }
        ));
        Ok(vec![m])
    }
}

/// How one time.sleep point waits: a sleep strategy, or a user-space
/// stack's timer (which replaces the strategy and names the metric).
struct Waiting<'p> {
    strategy: Strategy,
    stack_timer: Option<crate::stack_timer::StackTimer>,
    /// The metric: the strategy's or the stack timer's name.
    name: &'p str,
    requested_us: i64,
}

/// What a point's sleeps gave.
struct Slept {
    samples: Samples,
    /// CPU time of the sleeping thread, as a share of the wall time.
    cpu_share: f64,
    /// CPU time of the whole process, as a share of the wall time.
    process_cpu_share: f64,
}

impl<'p> Waiting<'p> {
    fn from_params(params: &'p Params) -> Result<Waiting<'p>, ExperimentError> {
        // `timer` replaces `strategy`: a point naming both comes from a
        // --param applied to every grid point (`--param strategy=hybrid`
        // also lands on the timer points); measuring it would label one
        // thing as the other.
        if let (Some(timer), Some(strategy)) = (params.text("timer"), params.text("strategy")) {
            return Err(ExperimentError::Unsupported(format!(
                "timer={timer} and strategy={strategy} name two ways to wait; a point takes one (set the other with --param only to sweep it)"
            )));
        }
        let name = params.text("strategy").unwrap_or("hybrid");
        let strategy = strategy_named(name)
            .ok_or_else(|| bad_param("strategy", name, &STRATEGIES.join(", ")))?;
        let stack_timer = match params.text("timer") {
            None => None,
            Some(t) => Some(
                crate::stack_timer::StackTimer::named(t)
                    .ok_or_else(|| bad_param("timer", t, &crate::stack_timer::TIMERS.join(", ")))?,
            ),
        };
        let requested_us = params.int("requested").unwrap_or(100);
        if !(1..=1_000_000).contains(&requested_us) {
            return Err(bad_param(
                "requested",
                requested_us,
                "1 to 1000000 (microseconds)",
            ));
        }
        Ok(Waiting {
            strategy,
            stack_timer,
            name: stack_timer.map_or(name, |kind| kind.metric()),
            requested_us,
        })
    }

    /// Sleep as the harness asks, each sleep's wake-up error a sample.
    fn sample(&self, harness: Harness) -> Result<Slept, ExperimentError> {
        let name = self.name;
        let mut rig = match self.stack_timer {
            None => None,
            Some(kind) => {
                let slack = timer_slack().map(|s| s.as_nanos() as u64);
                Some(
                    crate::stack_timer::Rig::new(kind, slack)
                        .map_err(|e| ExperimentError::io(format!("setting up {name}"), e))?,
                )
            }
        };
        let requested_ns = self.requested_us as u64 * 1_000;
        let wall_start = monotonic_ns();
        let cpu_start = thread_cpu_ns();
        let process_cpu_start = process_cpu_ns();
        let samples = harness.each_reported(|| {
            let deadline = monotonic_ns() + requested_ns;
            let woke = match rig.as_mut() {
                Some(rig) => rig.sleep_until(deadline),
                None => sleep_until(self.strategy, deadline),
            }
            .map_err(|e| ExperimentError::io(format!("sleeping with {name}"), e))?;
            // Signed: a negative error (an early wake-up) must show.
            Ok((woke as i64 - deadline as i64) as f64)
        })?;
        // Clamped: the two clocks are read at slightly different moments.
        let wall = (monotonic_ns() - wall_start).max(1) as f64;
        Ok(Slept {
            samples,
            cpu_share: ((thread_cpu_ns() - cpu_start) as f64 / wall).min(1.0),
            process_cpu_share: (process_cpu_ns() - process_cpu_start) as f64 / wall,
        })
    }

    /// The wake-up error, with how it was measured.
    fn measurement(
        &self,
        id: &str,
        params: &Params,
        slept: &Slept,
    ) -> Result<Measurement, ExperimentError> {
        let (name, ns) = (self.name, &slept.samples.ns);
        let summary = Summary::of(ns).ok_or_else(|| {
            ExperimentError::Failed(format!("time.sleep {name}: no valid samples"))
        })?;
        let mut m = Measurement::new(id, name, params.clone(), Unit::Nanoseconds, summary);
        m.histogram = Histogram::log_spaced(ns, HISTOGRAM_BINS);
        m.notes.push(format!(
            "wake-up error of {} sleeps of {} us: clock when the sleep returned minus its deadline (clock before the sleep + requested), CLOCK_MONOTONIC",
            ns.len(),
            self.requested_us
        ));
        match self.stack_timer {
            Some(kind) => {
                m.notes.push(kind.note().to_string());
                m.notes.push(format!(
                    "CPU time of the whole process (this thread, the runtime and any timer thread): {:.0}% of one CPU",
                    slept.process_cpu_share * 100.0
                ));
            }
            None => m.notes.push(strategy_note(self.strategy)),
        }
        m.notes.extend(zero_note(ns));
        Ok(m)
    }
}

/// policy=other, or policy=fifo: this thread becomes real-time (root only).
fn enter_policy(params: &Params) -> Result<Option<Realtime>, ExperimentError> {
    match params.text("policy").unwrap_or("other") {
        "other" => Ok(None),
        "fifo" if !osprobe_core::sys::is_root() => Err(ExperimentError::Unsupported(
            "policy=fifo needs root (SCHED_FIFO and mlockall, cyclictest's method)".into(),
        )),
        "fifo" => Realtime::enter(FIFO_PRIORITY)
            .map(Some)
            .map_err(|e| ExperimentError::Unsupported(format!("policy=fifo: {e}"))),
        other => Err(bad_param("policy", other, "other, fifo")),
    }
}

/// The harness for a point: its budget scaled by the profile, or to
/// `duration_ms` when given.
fn sleep_harness<'c>(ctx: &'c Context, params: &Params) -> Result<Harness<'c>, ExperimentError> {
    let mut harness = match ctx.profile {
        // A few seconds for the whole quick grid.
        Profile::Smoke => ctx.harness(),
        Profile::Quick => ctx.harness().time_scale(0.2),
        Profile::Full => ctx.harness().time_scale(0.5),
    };
    if let Some(ms) = params.int("duration_ms") {
        if !(1..=600_000).contains(&ms) {
            return Err(bad_param("duration_ms", ms, "1 to 600000"));
        }
        let base = harness.budget().time.as_secs_f64();
        harness = harness
            .time_scale(ms as f64 / 1e3 / base)
            .max_samples(MAX_SLEEPS);
    }
    Ok(harness)
}

/// The ways the timer service may wait, offered by time.timers: the
/// service maps the other kernel strategies to the same futex wait as
/// clock_nanosleep_abs (see osprobe_core::timers).
const SERVICE_STRATEGIES: &[&str] = &["hybrid", "clock_nanosleep_abs", "spin"];

/// time.timers' modes: one-shot timers with random deadlines, or periodic
/// timers on absolute deadlines or re-armed from their firing.
const TIMER_MODES: &[&str] = &["random", "absolute", "rearm"];

/// The earliest a timer is due after its registration.
const MIN_AHEAD_NS: u64 = 1_000_000;

/// Seed of the deadlines, so that a run can be repeated.
const TIMERS_SEED: u64 = 0x7133_5eed;

/// A timer that has not fired yet, in [`Round::late_ns`].
const NOT_FIRED: u64 = u64::MAX;

/// What one round's callbacks write: each timer's lateness, and how many
/// are still to fire (the last one wakes the measuring thread).
struct Round {
    late_ns: Vec<AtomicU64>,
    remaining: AtomicUsize,
    done: Mutex<bool>,
    done_signal: Condvar,
}

impl Round {
    fn new(n: usize) -> Round {
        Round {
            late_ns: (0..n).map(|_| AtomicU64::new(NOT_FIRED)).collect(),
            remaining: AtomicUsize::new(n),
            done: Mutex::new(false),
            done_signal: Condvar::new(),
        }
    }

    fn fired(&self, index: usize, fired: Fired) {
        self.late_ns[index].store(fired.lateness_ns(), Ordering::Relaxed);
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
            self.done_signal.notify_one();
        }
    }

    /// Wait until every timer fired, `limit` passed or the user
    /// interrupted; true if all fired.
    fn wait(&self, ctx: &Context, limit: Duration) -> Result<bool, ExperimentError> {
        let end = monotonic_ns() + limit.as_nanos() as u64;
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        while !*done {
            let now = monotonic_ns();
            if now >= end {
                return Ok(false);
            }
            // Short slices, to notice Ctrl-C.
            let slice = Duration::from_nanos((end - now).min(100_000_000));
            done = self
                .done_signal
                .wait_timeout(done, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if !*done {
                ctx.check_interrupt()?;
            }
        }
        Ok(true)
    }
}

/// time.timers: how late the timer service fires many callbacks.
pub struct Timers;

impl Timers {
    /// The latest deadline after registration, and the time budget of one
    /// point (rounds repeat until it is spent; at least one round).
    fn window_and_budget(profile: Profile) -> (Duration, Duration) {
        match profile {
            Profile::Smoke => (Duration::from_millis(5), Duration::from_millis(20)),
            Profile::Quick => (Duration::from_millis(20), Duration::from_millis(150)),
            Profile::Full => (Duration::from_millis(100), Duration::from_millis(1_500)),
        }
    }
}

impl Timers {
    /// A point of the periodic modes (see [`crate::heartbeat`]).
    fn run_periodic(
        &self,
        ctx: &Context,
        params: &Params,
        timers: usize,
        strategy: Strategy,
        rearm: Rearm,
    ) -> Result<Vec<Measurement>, ExperimentError> {
        let period_us = params.int("period_us").unwrap_or(100_000);
        if !(100..=1_000_000).contains(&period_us) {
            return Err(bad_param("period_us", period_us, "100 to 1000000"));
        }
        let periods = params.int("periods").unwrap_or(50);
        let span_us = heartbeat::MAX_SPAN.as_micros() as i64;
        if periods < 1 || periods.saturating_mul(period_us) > span_us {
            return Err(bad_param(
                "periods",
                periods,
                &format!(
                    "1 or more, with periods x period_us ({period_us}) at most {span_us} (600 s)"
                ),
            ));
        }
        let hb = heartbeat::Heartbeat {
            timers,
            period: Duration::from_micros(period_us as u64),
            periods: periods as u64,
            rearm,
            strategy,
        };
        heartbeat::measure(ctx, params, self.id(), hb)
    }
}

impl Experiment for Timers {
    fn id(&self) -> &'static str {
        "time.timers"
    }
    fn description(&self) -> &'static str {
        "the timer service (the SOS design document's clock driver): many registered callbacks with random deadlines, how late each fires, and the cost of registering one; periodic timers (the heartbeat) and their drift, absolute deadlines against re-arming from the callback"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "timers",
                help: "timers pending at once (also the service's maximum)",
                kind: ParamKind::Int {
                    min: 1,
                    max: 10_000,
                },
            },
            ParamSpec {
                name: "strategy",
                help: "how the service thread waits for the next deadline",
                kind: ParamKind::Choice(SERVICE_STRATEGIES),
            },
            ParamSpec {
                name: "mode",
                help: "random: one-shot timers with random deadlines; absolute: periodic timers on a fixed grid (next = first + k * period); rearm: periodic timers re-armed from their firing (next = fired + period), which drift",
                kind: ParamKind::Choice(TIMER_MODES),
            },
            ParamSpec {
                name: "period_us",
                help: "periodic modes: the period in microseconds (the SOS heartbeat: 100000)",
                kind: ParamKind::Int {
                    min: 100,
                    max: 1_000_000,
                },
            },
            ParamSpec {
                name: "periods",
                help: "periodic modes: K, the drift is taken after K periods (periods x period at most 600 s)",
                kind: ParamKind::Int {
                    min: 1,
                    max: 1_000_000,
                },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let (counts, strategies): (&[i64], &[&str]) = match profile {
            Profile::Smoke => (&[1, 100], &["hybrid"]),
            Profile::Quick => (&[1, 10, 100, 1_000, 10_000], &["hybrid"]),
            Profile::Full => (&[1, 10, 100, 1_000, 10_000], SERVICE_STRATEGIES),
        };
        let mut points = Vec::new();
        for s in strategies {
            for &n in counts {
                points.push(Params::new().with("timers", n).with("strategy", *s));
            }
        }
        // Periodic timers: the drift of each way of re-arming, side by side.
        // (timers, period in us, periods); full has the SOS heartbeat.
        let periodic: &[(i64, i64, i64)] = match profile {
            Profile::Smoke => &[(1, 1_000, 20)],
            Profile::Quick => &[(1, 10_000, 50), (100, 10_000, 50)],
            Profile::Full => &[(1, 1_000, 1_000), (1, 100_000, 50), (100, 100_000, 50)],
        };
        for &(n, period, k) in periodic {
            for mode in ["absolute", "rearm"] {
                points.push(
                    Params::new()
                        .with("timers", n)
                        .with("strategy", "hybrid")
                        .with("mode", mode)
                        .with("period_us", period)
                        .with("periods", k),
                );
            }
        }
        points
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let n = params.int("timers").unwrap_or(100);
        if !(1..=10_000).contains(&n) {
            return Err(bad_param("timers", n, "1 to 10000"));
        }
        let n = n as usize;
        let name = params.text("strategy").unwrap_or("hybrid");
        let strategy = strategy_named(name)
            .filter(|_| SERVICE_STRATEGIES.contains(&name))
            .ok_or_else(|| bad_param("strategy", name, &SERVICE_STRATEGIES.join(", ")))?;
        let rearm = match params.text("mode").unwrap_or("random") {
            "random" => None,
            "absolute" => Some(Rearm::Absolute),
            "rearm" => Some(Rearm::FromFired),
            other => return Err(bad_param("mode", other, &TIMER_MODES.join(", "))),
        };
        if let Some(rearm) = rearm {
            return self.run_periodic(ctx, params, n, strategy, rearm);
        }
        let (window, budget) = Timers::window_and_budget(ctx.profile);
        let rounds = RandomRounds::run(ctx, n, strategy, window, budget)?;
        rounds.measurements(self.id(), params, ctx.clock.cycles_per_ns())
    }
}

/// time.timers mode=random: rounds of `n` one-shot timers with random
/// deadlines, and what they recorded.
struct RandomRounds {
    n: usize,
    strategy: Strategy,
    window: Duration,
    /// Every callback's lateness.
    late: Vec<f64>,
    /// Every registration's time.
    register_ns: Vec<f64>,
    /// Per round, the share of its timers that fired.
    fired_share: Vec<f64>,
    /// Process CPU time while the rounds ran, in CPUs.
    cpu_share: f64,
    /// Callbacks that panicked.
    panicked: u64,
}

impl RandomRounds {
    /// Rounds until `budget` is spent.
    fn run(
        ctx: &Context,
        n: usize,
        strategy: Strategy,
        window: Duration,
        budget: Duration,
    ) -> Result<RandomRounds, ExperimentError> {
        let service = TimerService::with_strategy(n, strategy)
            .map_err(|e| ExperimentError::io("starting the timer service thread", e))?;
        let mut rounds = RandomRounds {
            n,
            strategy,
            window,
            late: Vec::new(),
            register_ns: Vec::with_capacity(n),
            fired_share: Vec::new(),
            cpu_share: 0.0,
            panicked: 0,
        };
        let mut rng = SplitMix64::new(TIMERS_SEED);
        let start = monotonic_ns();
        let cpu_start = process_cpu_ns();
        loop {
            ctx.check_interrupt()?;
            rounds.one_round(ctx, &service, &mut rng)?;
            if monotonic_ns() - start >= budget.as_nanos() as u64 {
                break;
            }
        }
        let wall = (monotonic_ns() - start).max(1);
        rounds.cpu_share = (process_cpu_ns() - cpu_start) as f64 / wall as f64;
        rounds.panicked = service.panicked();
        service.shutdown();
        Ok(rounds)
    }

    /// Register `n` timers (each registration timed), wait for them, and
    /// record their lateness.
    fn one_round(
        &mut self,
        ctx: &Context,
        service: &TimerService,
        rng: &mut SplitMix64,
    ) -> Result<(), ExperimentError> {
        let (n, clock) = (self.n, &ctx.clock);
        let window_ns = self.window.as_nanos() as u64;
        let round = Arc::new(Round::new(n));
        let mut ids: Vec<TimerId> = Vec::with_capacity(n);
        for i in 0..n {
            let delay = MIN_AHEAD_NS + rng.below(window_ns - MIN_AHEAD_NS + 1);
            let for_callback = Arc::clone(&round);
            let t0 = clock.start();
            let id = service
                .register(When::After(Duration::from_nanos(delay)), move |f| {
                    for_callback.fired(i, f)
                })
                .map_err(|e| ExperimentError::failed(format!("registering timer {i}"), e))?;
            let t1 = clock.stop();
            self.register_ns
                .push(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - ctx.timer_overhead_ticks));
            ids.push(id);
        }
        // Generous: a bound on a stuck service, not a timing target.
        let all_fired = round.wait(ctx, self.window + Duration::from_secs(2))?;
        if !all_fired {
            // What has not fired by now is abandoned, so that the next
            // round has room under the maximum.
            for &id in &ids {
                service.remove(id);
            }
        }
        let mut fired = 0usize;
        for slot in &round.late_ns {
            let v = slot.load(Ordering::Relaxed);
            if v != NOT_FIRED {
                self.late.push(v as f64);
                fired += 1;
            }
        }
        self.fired_share.push(fired as f64 / n as f64);
        Ok(())
    }

    fn wait_note(&self) -> String {
        match self.strategy {
            Strategy::Hybrid { spin } => format!(
                "the service thread (timer slack 1 ns) blocks in a futex with an absolute CLOCK_MONOTONIC deadline until {} us before the next deadline, then spins",
                spin.as_micros()
            ),
            Strategy::Spin => "the service thread spins until each deadline".into(),
            _ => "the service thread (timer slack 1 ns) blocks in a futex with an absolute CLOCK_MONOTONIC deadline until the next deadline".into(),
        }
    }

    /// late, register and fired.
    fn measurements(
        &self,
        id: &'static str,
        params: &Params,
        cycles_per_ns: Option<f64>,
    ) -> Result<Vec<Measurement>, ExperimentError> {
        let n = self.n;
        let rounds = self.fired_share.len();
        let registered = rounds * n;
        let fired = self.late.len();
        let setup = format!(
            "{rounds} round(s) of {n} timers, each due {} ms .. {} ms after its registration (uniform, seed {TIMERS_SEED:#x}); at most {n} pending",
            MIN_AHEAD_NS / 1_000_000,
            self.window.as_millis()
        );
        let mut out = Vec::new();
        if let Some(summary) = Summary::of(&self.late) {
            let mut m = Measurement::new(id, "late", params.clone(), Unit::Nanoseconds, summary);
            m.histogram = Histogram::log_spaced(&self.late, HISTOGRAM_BINS);
            m.notes.push(format!(
                "lateness of each callback: the clock just before it was called minus its deadline; {fired} of {registered} fired"
            ));
            m.notes.push(setup.clone());
            m.notes.push(self.wait_note());
            m.notes.push("callbacks run one after another on the service thread: a burst of deadlines makes the later ones late".into());
            m.notes.extend(zero_note(&self.late));
            m.notes.push(format!(
                "process CPU time while the rounds ran: {:.2} CPUs (the service thread, and this one registering)",
                self.cpu_share
            ));
            if self.panicked > 0 {
                m.notes
                    .push(format!("{} callbacks panicked", self.panicked));
            }
            out.push(m);
        }
        if let Some(summary) = Summary::of(&self.register_ns) {
            let mut m =
                Measurement::new(id, "register", params.clone(), Unit::Nanoseconds, summary);
            m.cycles = cycles_per_ns.map(|c| m.summary.scaled(c));
            m.notes.push("one TimerService::register call: boxing the callback, taking the lock, the heap insertion and, for a new earliest timer, a futex wake-up; timed one call at a time, clock read cost subtracted".into());
            m.notes.push(setup);
            out.push(m);
        }
        let summary = Summary::of(&self.fired_share)
            .ok_or_else(|| ExperimentError::Failed("time.timers: no round completed".into()))?;
        let mut m = Measurement::new(id, "fired", params.clone(), Unit::Ratio, summary);
        m.notes.push(format!(
            "share of each round's timers that fired within the window + 2 s: {fired} of {registered} in all"
        ));
        out.push(m);
        Ok(out)
    }
}

/// A `sched_param` of this priority. musl's has more fields than glibc's
/// (the sporadic server's), so it starts from zero rather than a literal.
fn sched_param(priority: libc::c_int) -> libc::sched_param {
    // SAFETY: sched_param is plain integers; all zeros is a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = priority;
    param
}

/// The scheduling policy of the calling thread, as raw system calls:
/// musl's sched_getscheduler, sched_getparam and sched_setscheduler return
/// ENOSYS by design (POSIX defines them per process, Linux applies them per
/// thread), so a static musl build could not enter SCHED_FIFO through them.
mod sched {
    use std::io;

    /// The calling thread's policy (SCHED_OTHER, SCHED_FIFO, ...).
    pub(super) fn policy() -> io::Result<libc::c_int> {
        // SAFETY: pid 0 is the calling thread; no pointer is passed.
        let rc = unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc as libc::c_int)
    }

    /// The calling thread's scheduling parameters.
    pub(super) fn param() -> io::Result<libc::sched_param> {
        let mut param = super::sched_param(0);
        // SAFETY: pid 0 is the calling thread; `param` is a valid
        // sched_param the kernel fills (it writes the priority only).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getparam,
                0,
                &mut param as *mut libc::sched_param,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(param)
    }

    /// Set the calling thread's policy and parameters.
    pub(super) fn set(policy: libc::c_int, param: &libc::sched_param) -> io::Result<()> {
        // SAFETY: pid 0 is the calling thread; `param` lives for the call
        // and the kernel only reads it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setscheduler,
                0,
                policy,
                param as *const libc::sched_param,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric<'a>(ms: &'a [Measurement], name: &str) -> &'a Measurement {
        ms.iter()
            .find(|m| m.metric == name)
            .unwrap_or_else(|| panic!("no metric {name}"))
    }

    #[test]
    fn every_strategy_name_is_a_strategy_and_its_metric() {
        for name in STRATEGIES {
            assert_eq!(strategy_named(name).unwrap().name(), *name);
        }
        assert!(strategy_named("usleep").is_none());
    }

    #[test]
    fn grids_use_valid_parameters() {
        for exp in [&Sleep as &dyn Experiment, &Timers] {
            for profile in Profile::ALL {
                let grid = exp.grid(profile);
                assert!(!grid.is_empty());
                for point in grid {
                    for (name, value) in &point.0 {
                        let spec = exp.params().iter().find(|s| s.name == name).unwrap();
                        assert_eq!(spec.parse(&value.to_string()).ok().as_ref(), Some(value));
                    }
                }
            }
        }
    }

    #[test]
    fn sleep_errors_are_never_negative() {
        let ctx = Context::for_tests(Profile::Smoke);
        for name in STRATEGIES {
            let params = Params::new()
                .with("strategy", *name)
                .with("requested", 20)
                .with("policy", "other");
            let ms = Sleep.run(&ctx, &params).unwrap();
            let m = metric(&ms, name);
            assert_eq!(m.unit, Unit::Nanoseconds);
            assert!(m.summary.min >= 0.0, "{name} woke early: {:?}", m.summary);
            assert!(m.notes.iter().any(|n| n.contains("timer slack")));
        }
    }

    #[test]
    fn bad_parameters_name_the_value_and_what_is_accepted() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new().with("strategy", "usleep");
        assert!(matches!(
            Sleep.run(&ctx, &p),
            Err(ExperimentError::InvalidParameter {
                name: "strategy",
                ..
            })
        ));
        let e = Sleep.run(&ctx, &p).unwrap_err().to_string();
        assert!(
            e.contains("'usleep'") && e.contains("clock_nanosleep_abs"),
            "{e}"
        );
        let p = Params::new()
            .with("strategy", "hybrid")
            .with("policy", "rr");
        let e = Sleep.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'rr'") && e.contains("other, fifo"), "{e}");
        let p = Params::new().with("timers", 0);
        let e = Timers.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("1 to 10000"), "{e}");
        let p = Params::new().with("timers", 5).with("strategy", "epoll");
        let e = Timers.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'epoll'") && e.contains("hybrid"), "{e}");
        let p = Params::new().with("mode", "cron");
        let e = Timers.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'cron'") && e.contains("absolute, rearm"), "{e}");
        let p = Params::new()
            .with("mode", "absolute")
            .with("period_us", 100_000)
            .with("periods", 10_000);
        let e = Timers.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'10000'") && e.contains("600 s"), "{e}");
        let p = Params::new().with("mode", "rearm").with("period_us", 5);
        let e = Timers.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("'5'") && e.contains("100 to 1000000"), "{e}");
    }

    #[test]
    fn fifo_restores_the_policy_or_is_unsupported() {
        let ctx = Context::for_tests(Profile::Smoke);
        let before = sched::policy().unwrap();
        let p = Params::new()
            .with("strategy", "clock_nanosleep_abs")
            .with("requested", 50)
            .with("policy", "fifo");
        match Sleep.run(&ctx, &p) {
            Ok(ms) => assert!(ms[0].notes.iter().any(|n| n.contains("SCHED_FIFO"))),
            Err(ExperimentError::Unsupported(reason)) => {
                assert!(reason.contains("fifo"), "{reason}")
            }
            Err(e) => panic!("{e}"),
        }
        assert_eq!(sched::policy().unwrap(), before);
    }

    #[test]
    fn this_threads_policy_is_readable_and_settable_with_any_c_library() {
        // musl's sched_getscheduler and sched_setscheduler fail with ENOSYS:
        // the static build must still read and restore the policy.
        let policy = sched::policy().expect("sched_getscheduler");
        let param = sched::param().expect("sched_getparam");
        sched::set(policy, &param).expect("setting the same policy back");
        assert_eq!(sched::policy().unwrap(), policy);
    }

    #[test]
    fn slack_is_set_for_the_point_and_restored() {
        let ctx = Context::for_tests(Profile::Smoke);
        let before = timer_slack();
        let p = Params::new()
            .with("strategy", "clock_nanosleep_abs")
            .with("requested", 20)
            .with("slack_ns", 1);
        let ms = Sleep.run(&ctx, &p).unwrap();
        assert!(
            ms[0]
                .notes
                .iter()
                .any(|n| n.contains("timer slack of this thread: 1 ns")),
            "{:?}",
            ms[0].notes
        );
        assert_eq!(timer_slack(), before);
    }

    #[test]
    fn every_timer_fires_and_none_early() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new().with("timers", 50).with("strategy", "hybrid");
        let ms = Timers.run(&ctx, &p).unwrap();
        let fired = metric(&ms, "fired");
        assert_eq!(fired.summary.min, 1.0, "{:?}", fired.notes);
        let late = metric(&ms, "late");
        assert!(late.summary.min >= 0.0);
        assert_eq!(late.summary.n % 50, 0);
        assert!(metric(&ms, "register").summary.n >= 50);
    }

    #[test]
    fn a_stack_timer_row_has_its_metric_histogram_and_notes() {
        let ctx = Context::for_tests(Profile::Smoke);
        for (timer, metric_name) in [
            ("tokio", "tokio_sleep"),
            ("timerfd", "timerfd_thread"),
            ("hybrid", "tokio_woken_by_timerfd"),
        ] {
            let params = Params::new()
                .with("timer", timer)
                .with("requested", 200)
                .with("policy", "other");
            let ms = Sleep.run(&ctx, &params).unwrap();
            let m = metric(&ms, metric_name);
            assert_eq!(m.unit, Unit::Nanoseconds);
            assert!(m.summary.n > 0);
            assert!(m.summary.min >= 0.0, "{timer} woke early: {:?}", m.summary);
            assert!(m.histogram.is_some(), "{timer}");
            assert!(
                m.notes
                    .iter()
                    .any(|n| n.starts_with(&format!("timer={timer}"))),
                "{:?}",
                m.notes
            );
        }
        let p = Params::new().with("timer", "wheel");
        let e = Sleep.run(&ctx, &p).unwrap_err().to_string();
        assert!(
            e.contains("'wheel'") && e.contains("tokio, timerfd, hybrid"),
            "{e}"
        );
    }

    #[test]
    fn zero_errors_are_counted() {
        assert_eq!(zero_note(&[1.0, 2.0]), None);
        let note = zero_note(&[0.0, 3.0, 0.0]).unwrap();
        assert!(note.starts_with("2 of 3"), "{note}");
    }
}
