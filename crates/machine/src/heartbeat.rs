//! time.timers with `mode=absolute` or `mode=rearm`: periodic timers (the
//! SOS clock driver's 100 ms heartbeat) and how far they drift.
//!
//! `timers` periodic timers run on one timer service, all with the same
//! period, their first ticks spread evenly over one period after
//! registration. Each timer's ticks 0..=K (K = `periods`) are recorded;
//! tick k's grid point is first + k * period, and its drift is how far it
//! fired behind that point. The two ways of setting the next deadline
//! ([`Rearm`]) differ only in what the lateness of one tick does to the
//! next:
//!
//! - absolute: the deadline is the grid point, so the drift of tick k is
//!   its own lateness; it does not grow with k.
//! - rearm: the deadline is the previous firing plus the period, so the
//!   drift of tick K is the sum of the lateness of ticks 0..=K; it grows
//!   by the mean lateness every period, without bound.
//!
//! Reported: `drift` (one sample per timer: its drift after K periods),
//! `late` (every tick's lateness against its own deadline) and the share
//! of the ticks that fired within the time allowed.

use osprobe_core::clock::monotonic_ns;
use osprobe_core::model::{Histogram, Prediction};
use osprobe_core::sleep::Strategy;
use osprobe_core::timers::{Fired, Rearm, TimerId, TimerService, When};
use osprobe_core::{Context, ExperimentError, Measurement, Params, Summary, Unit};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A tick not recorded (yet).
const NOT_FIRED: u64 = u64::MAX;

/// Bins of the histograms.
const HISTOGRAM_BINS: usize = 30;

/// The longest a point may ask for (periods x period), so that a typo
/// cannot hold a run for hours.
pub const MAX_SPAN: Duration = Duration::from_secs(600);

/// What one point measures.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat {
    pub timers: usize,
    pub period: Duration,
    /// K: drift is taken at tick K (K + 1 ticks per timer).
    pub periods: u64,
    pub rearm: Rearm,
    pub strategy: Strategy,
}

/// The ticks the callbacks record: for timer i and tick k, when it fired
/// and its deadline; the last tick a timer needs wakes the measuring thread.
struct Ticks {
    ticks_per_timer: usize,
    fired_ns: Vec<AtomicU64>,
    due_ns: Vec<AtomicU64>,
    remaining: AtomicUsize,
    done: Mutex<bool>,
    done_signal: Condvar,
}

impl Ticks {
    fn new(timers: usize, ticks_per_timer: usize) -> Ticks {
        let slots = timers * ticks_per_timer;
        Ticks {
            ticks_per_timer,
            fired_ns: (0..slots).map(|_| AtomicU64::new(NOT_FIRED)).collect(),
            due_ns: (0..slots).map(|_| AtomicU64::new(NOT_FIRED)).collect(),
            remaining: AtomicUsize::new(timers),
            done: Mutex::new(false),
            done_signal: Condvar::new(),
        }
    }

    fn record(&self, timer: usize, fired: Fired) {
        let Ok(tick) = usize::try_from(fired.tick) else {
            return;
        };
        if tick >= self.ticks_per_timer {
            // Ticks after the last one measured (before removal) are ignored.
            return;
        }
        let slot = timer * self.ticks_per_timer + tick;
        self.due_ns[slot].store(fired.due_ns, Ordering::Relaxed);
        self.fired_ns[slot].store(fired.fired_ns, Ordering::Release);
        if tick + 1 == self.ticks_per_timer && self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
            self.done_signal.notify_one();
        }
    }

    /// Wait until every timer reached its last tick, or `limit` passed, or
    /// the user interrupted; true if all did.
    fn wait(&self, ctx: &Context, limit: Duration) -> Result<bool, ExperimentError> {
        let end = monotonic_ns().saturating_add(limit.as_nanos() as u64);
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

/// What one timer's recorded ticks say.
#[derive(Debug, Clone, PartialEq, Default)]
struct Trace {
    /// fired - due of each tick recorded.
    late_ns: Vec<f64>,
    /// fired - grid point of the last tick, if every tick was recorded.
    drift_end_ns: Option<f64>,
}

/// Lateness of each tick, and the drift of the last one against the grid
/// first + k * period (first: tick 0's deadline).
fn trace(fired_ns: &[u64], due_ns: &[u64], period_ns: u64) -> Trace {
    let mut out = Trace::default();
    let Some(&first) = due_ns.first().filter(|&&d| d != NOT_FIRED) else {
        return out;
    };
    let mut complete = true;
    for (&fired, &due) in fired_ns.iter().zip(due_ns) {
        if fired == NOT_FIRED || due == NOT_FIRED {
            complete = false;
            continue;
        }
        out.late_ns.push(fired.saturating_sub(due) as f64);
    }
    if complete {
        if let Some(&last) = fired_ns.last() {
            let k = fired_ns.len() as u64 - 1;
            let grid = first.saturating_add(k.saturating_mul(period_ns));
            // A tick cannot fire before its grid point: its deadline is
            // the grid point (absolute) or after it (rearm).
            out.drift_end_ns = Some(last.saturating_sub(grid) as f64);
        }
    }
    out
}

/// What the timers of one point recorded.
struct Recorded {
    /// Every recorded tick's lateness against its own deadline.
    late: Vec<f64>,
    /// One per timer whose ticks were all recorded: tick K's drift.
    drift: Vec<f64>,
    recorded: usize,
    expected: usize,
    /// Callbacks that panicked.
    panicked: u64,
    /// Whether every timer recorded all its ticks in the time allowed.
    all_done: bool,
}

/// One point being turned into measurements.
struct Point<'a> {
    experiment: &'a str,
    params: &'a Params,
    hb: Heartbeat,
    ticks_per_timer: usize,
    /// How the timers were set up, for every measurement's notes.
    setup: String,
}

/// Run one point; `params` are stored with the measurements.
pub fn measure(
    ctx: &Context,
    params: &Params,
    experiment: &str,
    hb: Heartbeat,
) -> Result<Vec<Measurement>, ExperimentError> {
    let ticks_per_timer = usize::try_from(hb.periods)
        .ok()
        .and_then(|k| k.checked_add(1))
        .ok_or_else(|| {
            ExperimentError::invalid_parameter(
                "periods",
                format!("periods={} is too many", hb.periods),
            )
        })?;
    let rec = run_timers(ctx, hb, ticks_per_timer)?;
    let point = Point {
        experiment,
        params,
        hb,
        ticks_per_timer,
        setup: setup_note(hb),
    };
    let mut out = Vec::new();
    out.extend(point.drift(&rec));
    out.extend(point.late(&rec));
    out.push(point.fired(&rec)?);
    Ok(out)
}

fn period_ns(hb: Heartbeat) -> u64 {
    u64::try_from(hb.period.as_nanos()).unwrap_or(u64::MAX)
}

/// Register the timers, wait for their ticks (bounded), stop the service
/// and read what was recorded.
fn run_timers(
    ctx: &Context,
    hb: Heartbeat,
    ticks_per_timer: usize,
) -> Result<Recorded, ExperimentError> {
    let period_ns = period_ns(hb);
    let ticks = Arc::new(Ticks::new(hb.timers, ticks_per_timer));
    let service = TimerService::with_strategy(hb.timers, hb.strategy)
        .map_err(|e| ExperimentError::io("starting the timer service thread", e))?;
    let start = monotonic_ns();
    let mut ids: Vec<TimerId> = Vec::with_capacity(hb.timers);
    for i in 0..hb.timers {
        // Spread the first ticks over one period so that the timers do not
        // all fall due at once (a burst would make the later ones late).
        let offset = period_ns / hb.timers as u64 * i as u64;
        let first = start + period_ns + offset;
        let for_callback = Arc::clone(&ticks);
        let id = service
            .register_periodic(When::At(first), hb.period, hb.rearm, move |f| {
                for_callback.record(i, f)
            })
            .map_err(|e| ExperimentError::failed(format!("registering periodic timer {i}"), e))?;
        ids.push(id);
    }
    // The ticks take (K + 2) periods; what is allowed beyond is a bound on
    // a stuck service, not a timing target.
    let span = hb
        .period
        .saturating_mul(u32::try_from(hb.periods + 2).unwrap_or(u32::MAX));
    let waited = ticks.wait(
        ctx,
        span.saturating_add(Duration::from_secs(2))
            .saturating_mul(2),
    );
    for &id in &ids {
        service.remove(id);
    }
    let panicked = service.panicked();
    service.shutdown();
    let all_done = waited?;
    Ok(collect(&ticks, hb, ticks_per_timer, panicked, all_done))
}

/// Each timer's trace, pooled.
fn collect(
    ticks: &Ticks,
    hb: Heartbeat,
    ticks_per_timer: usize,
    panicked: u64,
    all_done: bool,
) -> Recorded {
    let mut rec = Recorded {
        late: Vec::new(),
        drift: Vec::new(),
        recorded: 0,
        expected: hb.timers * ticks_per_timer,
        panicked,
        all_done,
    };
    for i in 0..hb.timers {
        let range = i * ticks_per_timer..(i + 1) * ticks_per_timer;
        let fired: Vec<u64> = ticks.fired_ns[range.clone()]
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect();
        let due: Vec<u64> = ticks.due_ns[range]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let t = trace(&fired, &due, period_ns(hb));
        rec.recorded += t.late_ns.len();
        rec.late.extend(t.late_ns);
        rec.drift.extend(t.drift_end_ns);
    }
    rec
}

/// How the timers were set up, in one note.
fn setup_note(hb: Heartbeat) -> String {
    format!(
        "{} periodic timer(s) every {} us, re-armed {}, first ticks spread over one period; drift taken at tick K = {} (the grid point is the first deadline + K periods)",
        hb.timers,
        hb.period.as_micros(),
        match hb.rearm {
            Rearm::Absolute => "on absolute deadlines (next = first + k * period)",
            Rearm::FromFired => "from the firing (next = fired + period)",
        },
        hb.periods
    )
}

impl Point<'_> {
    fn measurement(&self, metric: &str, unit: Unit, summary: Summary) -> Measurement {
        Measurement::new(self.experiment, metric, self.params.clone(), unit, summary)
    }

    /// Tick K's drift, one sample per timer, with what it should be.
    fn drift(&self, rec: &Recorded) -> Option<Measurement> {
        let (hb, ticks_per_timer) = (self.hb, self.ticks_per_timer);
        let mut m = self.measurement("drift", Unit::Nanoseconds, Summary::of(&rec.drift)?);
        m.histogram = Histogram::log_spaced(&rec.drift, HISTOGRAM_BINS);
        m.notes.push(format!(
            "how far each timer's tick K fired behind its grid point; one sample per timer whose {} ticks were all recorded ({} of {})",
            ticks_per_timer,
            rec.drift.len(),
            hb.timers
        ));
        m.notes.push(self.setup.clone());
        m.notes.push(format!(
            "drift per period: {:.0} ns (drift / K, at the median)",
            m.summary.p50 / hb.periods as f64
        ));
        let late = Summary::of(&rec.late);
        m.prediction = match hb.rearm {
            // Tick K's drift is its own lateness: at most the latest tick's.
            Rearm::Absolute => late.map(|s| {
                Prediction::bound(
                    s.max,
                    "at most the lateness of the latest tick (absolute deadlines do not accumulate it)",
                )
                .within(0.01)
            }),
            // Tick K's drift is the sum of the K + 1 ticks' lateness.
            Rearm::FromFired => late.map(|s| {
                let mean = s.mean;
                Prediction::new(
                    mean * ticks_per_timer as f64,
                    format!("(K + 1) x the mean lateness of one tick = {ticks_per_timer} x {mean:.0} ns (each re-arm carries the lateness forward)"),
                )
                .within(0.5)
            }),
        };
        Some(m)
    }

    /// Every tick's lateness against its own deadline.
    fn late(&self, rec: &Recorded) -> Option<Measurement> {
        let mut m = self.measurement("late", Unit::Nanoseconds, Summary::of(&rec.late)?);
        m.histogram = Histogram::log_spaced(&rec.late, HISTOGRAM_BINS);
        m.notes.push(format!(
            "lateness of each tick against its own deadline: the clock just before the callback minus the deadline; {} of {} ticks recorded",
            rec.recorded, rec.expected
        ));
        m.notes.push(self.setup.clone());
        if rec.panicked > 0 {
            m.notes.push(format!("{} callbacks panicked", rec.panicked));
        }
        Some(m)
    }

    /// The share of the ticks that fired in the time allowed.
    fn fired(&self, rec: &Recorded) -> Result<Measurement, ExperimentError> {
        let share = rec.recorded as f64 / rec.expected.max(1) as f64;
        let summary = Summary::of(&[share])
            .ok_or_else(|| ExperimentError::Failed("time.timers: no tick recorded".into()))?;
        let mut m = self.measurement("fired", Unit::Ratio, summary);
        m.notes.push(format!(
            "share of the ticks 0..=K of every timer that fired in the time allowed ({} of {}){}",
            rec.recorded,
            rec.expected,
            if rec.all_done {
                ""
            } else {
                "; the service fell behind"
            }
        ));
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::Profile;

    fn run(rearm: Rearm, timers: usize, periods: u64) -> Vec<Measurement> {
        let ctx = Context::for_tests(Profile::Smoke);
        let hb = Heartbeat {
            timers,
            period: Duration::from_millis(1),
            periods,
            rearm,
            strategy: Strategy::HYBRID_DEFAULT,
        };
        measure(&ctx, &Params::new(), "time.timers", hb).unwrap()
    }

    fn metric<'a>(ms: &'a [Measurement], name: &str) -> &'a Measurement {
        ms.iter()
            .find(|m| m.metric == name)
            .unwrap_or_else(|| panic!("no {name} in {ms:?}"))
    }

    #[test]
    fn a_trace_is_lateness_and_the_last_ticks_distance_from_the_grid() {
        // Absolute: deadlines on the grid 100, 200, 300.
        let t = trace(&[110, 205, 330], &[100, 200, 300], 100);
        assert_eq!(t.late_ns, vec![10.0, 5.0, 30.0]);
        assert_eq!(t.drift_end_ns, Some(30.0));
        // Rearm: each deadline is the previous firing + 100.
        let t = trace(&[110, 215, 330], &[100, 210, 315], 100);
        assert_eq!(t.late_ns, vec![10.0, 5.0, 15.0]);
        assert_eq!(t.drift_end_ns, Some(30.0), "the sum of the lateness");
        // A missing tick: lateness of the others, no drift.
        let t = trace(&[110, NOT_FIRED, 330], &[100, NOT_FIRED, 300], 100);
        assert_eq!(t.late_ns, vec![10.0, 30.0]);
        assert_eq!(t.drift_end_ns, None);
        assert_eq!(trace(&[NOT_FIRED], &[NOT_FIRED], 100), Trace::default());
    }

    /// Absolute deadlines: the drift after many periods is one tick's
    /// lateness, far below the sum re-arming would give.
    #[test]
    fn absolute_drift_stays_bounded() {
        let periods = 40;
        let ms = run(Rearm::Absolute, 1, periods);
        assert_eq!(metric(&ms, "fired").summary.min, 1.0);
        let drift = metric(&ms, "drift");
        let late = metric(&ms, "late");
        assert_eq!(late.summary.n as u64, periods + 1);
        // Drift is one of the ticks' lateness, never more than the latest.
        assert!(drift.summary.max <= late.summary.max, "{drift:?} {late:?}");
        // Generous: half of the 40 ms the ticks span.
        assert!(drift.summary.max < 20e6, "{:?}", drift.summary);
    }

    /// Re-arming from the firing: drift is never negative and grows with
    /// the number of periods (it is the sum of every tick's lateness).
    #[test]
    fn rearm_drift_accumulates() {
        let ms = run(Rearm::FromFired, 2, 30);
        let drift = metric(&ms, "drift");
        let late = metric(&ms, "late");
        assert_eq!(drift.summary.n, 2);
        assert!(drift.summary.min >= 0.0);
        // The sum of 31 lateness samples exceeds the largest single one
        // unless all others were zero.
        assert!(drift.summary.max >= late.summary.max, "{drift:?} {late:?}");
        assert!(drift.summary.min > 0.0);
        let p = drift.prediction.as_ref().expect("a prediction");
        assert!(p.formula.contains("K + 1"), "{}", p.formula);
    }
}
