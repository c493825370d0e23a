//! quinn-proto's congestion controllers by osprobe's names, each wrapped in
//! [`ObservingController`]: a thin wrapper that sees every acknowledgement
//! the controller sees, counts the RTT samples the stack's clock produced
//! (and how many were zero), and applies `StackClock::floor_rtt` where it
//! can.
//!
//! Where it can: in quinn-proto 0.11 the connection computes the RTT sample
//! (ack arrival minus send time, both on the stack's clock) and folds it
//! into its `RttEstimator` *before* the controller is called; the
//! controller gets the estimator by reference, and the estimator's fields,
//! constructor and `update` are private to quinn-proto. BBR takes its
//! min_rtt from `RttEstimator::min()` (it keeps no samples of its own),
//! Cubic reads `RttEstimator::get()` (the smoothed RTT), NewReno reads
//! neither; all three use the `sent` instant only to tell whether a packet
//! was sent before the current recovery period began. So a wrapper can
//! compute and floor the sample (`now - sent`) but has nothing to hand the
//! floored value to: the floor reaches the wrapper's own record and the
//! report, not the controller. `notes()` says so in every outcome.

use crate::clock::StackClock;
use quinn_proto::congestion::{
    Bbr, BbrConfig, Controller, ControllerFactory, ControllerMetrics, Cubic, CubicConfig, NewReno,
    NewRenoConfig,
};
use quinn_proto::RttEstimator;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `cc=` accepts for QUIC.
pub const CC_VALUES: &str = "reno (or newreno), cubic, bbr";

/// One of quinn-proto's congestion controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcKind {
    NewReno,
    Cubic,
    Bbr,
}

impl CcKind {
    /// `reno`, `newreno`, `cubic`, `bbr`.
    pub fn parse(text: &str) -> Result<CcKind, crate::error::ParamError> {
        match text.trim() {
            "reno" | "newreno" => Ok(CcKind::NewReno),
            "cubic" => Ok(CcKind::Cubic),
            "bbr" => Ok(CcKind::Bbr),
            other => Err(crate::error::ParamError {
                name: "cc",
                reason: format!(
                    "cc '{other}' for QUIC: expected {CC_VALUES} (quinn-proto's controllers)"
                ),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CcKind::NewReno => "newreno",
            CcKind::Cubic => "cubic",
            CcKind::Bbr => "bbr",
        }
    }

    fn build(self, now: Instant, mtu: u16) -> Box<dyn Controller> {
        match self {
            CcKind::NewReno => Box::new(NewReno::new(Arc::new(NewRenoConfig::default()), now, mtu)),
            CcKind::Cubic => Box::new(Cubic::new(Arc::new(CubicConfig::default()), now, mtu)),
            CcKind::Bbr => Box::new(Bbr::new(Arc::new(BbrConfig::default()), mtu)),
        }
    }
}

/// What the wrappers of one connection saw, shared with the driver.
#[derive(Debug, Default)]
pub struct SampleRecord {
    /// Acknowledged packets (one sample each: arrival minus send time).
    samples: AtomicU64,
    /// Of which zero on the stack's clock (sent and acknowledged in one tick).
    zero: AtomicU64,
    /// Of which raised by the floor.
    floored: AtomicU64,
    /// The smallest sample after the floor, in ns (u64::MAX: none yet).
    min_floored_ns: AtomicU64,
}

/// A snapshot of a [`SampleRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleCounts {
    pub samples: u64,
    pub zero: u64,
    pub floored: u64,
    pub min_floored: Option<Duration>,
}

impl SampleRecord {
    pub fn new() -> SampleRecord {
        SampleRecord {
            min_floored_ns: AtomicU64::new(u64::MAX),
            ..SampleRecord::default()
        }
    }

    pub fn counts(&self) -> SampleCounts {
        let min = self.min_floored_ns.load(Ordering::Relaxed);
        SampleCounts {
            samples: self.samples.load(Ordering::Relaxed),
            zero: self.zero.load(Ordering::Relaxed),
            floored: self.floored.load(Ordering::Relaxed),
            min_floored: (min != u64::MAX).then(|| Duration::from_nanos(min)),
        }
    }

    /// Record one sample; returns it as the patched stack counts it.
    fn record(&self, clock: &StackClock, sample: Duration) -> Duration {
        self.samples.fetch_add(1, Ordering::Relaxed);
        if sample.is_zero() {
            self.zero.fetch_add(1, Ordering::Relaxed);
        }
        let floored = clock.floor_rtt(sample);
        if floored != sample {
            self.floored.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(floored.as_nanos()).unwrap_or(u64::MAX);
        self.min_floored_ns.fetch_min(ns, Ordering::Relaxed);
        floored
    }
}

/// Builds the chosen controller wrapped in an [`ObservingController`].
pub struct ObservingFactory {
    pub kind: CcKind,
    pub clock: StackClock,
    pub record: Arc<SampleRecord>,
}

impl ControllerFactory for ObservingFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(ObservingController {
            inner: self.kind.build(now, current_mtu),
            clock: self.clock,
            record: self.record.clone(),
        })
    }
}

/// A controller as quinn-proto built it, plus the record of its samples.
pub struct ObservingController {
    inner: Box<dyn Controller>,
    clock: StackClock,
    record: Arc<SampleRecord>,
}

impl ObservingController {
    /// The sample one acknowledgement carries, as the patched stack counts
    /// it (zero raised to one tick under `tick:P+floor`).
    pub fn sample(&self, now: Instant, sent: Instant) -> Duration {
        self.record
            .record(&self.clock, now.saturating_duration_since(sent))
    }
}

impl Controller for ObservingController {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number)
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        // The floored sample is recorded; the estimator goes on unchanged
        // because quinn-proto offers no way to build or adjust one (see the
        // module docs).
        let _floored = self.sample(now, sent);
        self.inner.on_ack(now, sent, bytes, app_limited, rtt)
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked)
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes)
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu)
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(ObservingController {
            inner: self.inner.clone_box(),
            clock: self.clock,
            record: self.record.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What the outcome says about the floor and the samples, in plain words.
pub fn notes(clock: &StackClock, kind: CcKind, counts: SampleCounts) -> Vec<String> {
    let mut notes = vec![format!(
        "quinn-proto {kind}: {} acknowledged packets gave an RTT sample on the stack's clock, {} of them zero (sent and acknowledged within one tick)",
        counts.samples,
        counts.zero,
        kind = kind.name()
    )];
    if clock.mode().floors_rtt() {
        notes.push(format!(
            "clock {}: the floor could NOT reach quinn-proto's controller: quinn-proto 0.11 folds each RTT sample into its RttEstimator before calling the controller, and the estimator's fields and update are private; BBR takes min_rtt from that estimator, Cubic its smoothed RTT, NewReno neither. The wrapper floored {} zero samples in its own record only, so this row measures what tick:P without the floor measures",
            clock.mode(),
            counts.floored
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockMode;

    fn wrapper(clock: &str) -> ObservingController {
        let clock = StackClock::new(ClockMode::parse(clock).unwrap());
        let factory = Arc::new(ObservingFactory {
            kind: CcKind::Bbr,
            clock,
            record: Arc::new(SampleRecord::new()),
        });
        let controller = factory.build(clock.origin(), 1200);
        *controller
            .into_any()
            .downcast::<ObservingController>()
            .unwrap()
    }

    #[test]
    fn the_floor_raises_a_zero_sample_to_one_tick() {
        let patched = wrapper("tick:10ms+floor");
        let t = patched.clock.now_instant();
        assert_eq!(patched.sample(t, t), Duration::from_millis(10));
        let later = t + Duration::from_millis(20);
        assert_eq!(patched.sample(later, t), Duration::from_millis(20));
        let counts = patched.record.counts();
        assert_eq!(
            counts,
            SampleCounts {
                samples: 2,
                zero: 1,
                floored: 1,
                min_floored: Some(Duration::from_millis(10)),
            }
        );
    }

    #[test]
    fn without_the_floor_a_zero_sample_stays_zero() {
        let plain = wrapper("tick:10ms");
        let t = plain.clock.now_instant();
        assert_eq!(plain.sample(t, t), Duration::ZERO);
        assert_eq!(plain.record.counts().floored, 0);
        assert_eq!(plain.record.counts().zero, 1);
    }

    #[test]
    fn the_wrapper_passes_the_controller_through() {
        let w = wrapper("fine");
        assert_eq!(w.window(), w.initial_window());
        assert!(w.window() > 0);
    }

    #[test]
    fn cc_names_parse_and_bad_ones_are_named() {
        assert_eq!(CcKind::parse("reno").unwrap(), CcKind::NewReno);
        assert_eq!(CcKind::parse("newreno").unwrap(), CcKind::NewReno);
        assert_eq!(CcKind::parse("cubic").unwrap(), CcKind::Cubic);
        assert_eq!(CcKind::parse("bbr").unwrap(), CcKind::Bbr);
        let err = CcKind::parse("vegas").unwrap_err().to_string();
        assert!(err.contains("'vegas'") && err.contains("bbr"), "{err}");
    }
}
