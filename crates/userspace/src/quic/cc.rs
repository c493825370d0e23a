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
//!
//! `bbr-linux` is osprobe's own controller (`bbr_linux`): it takes its RTT
//! samples itself, so the floor does reach it; the other three refuse a
//! `+floor` clock before the run (net.userspace's `check_point`).

use super::bbr_linux::{BbrLinux, BbrLinuxConfig, BbrLinuxSummary, BbrLinuxTrace};
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
pub const CC_VALUES: &str =
    "reno (or newreno), cubic, bbr (quinn-proto's), bbr-linux (Linux 4.9's)";

/// One of quinn-proto's congestion controllers, or osprobe's Linux BBR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcKind {
    NewReno,
    Cubic,
    Bbr,
    BbrLinux,
}

impl CcKind {
    /// `reno`, `newreno`, `cubic`, `bbr`.
    pub fn parse(text: &str) -> Result<CcKind, crate::error::ParamError> {
        match text.trim() {
            "reno" | "newreno" => Ok(CcKind::NewReno),
            "cubic" => Ok(CcKind::Cubic),
            "bbr" => Ok(CcKind::Bbr),
            "bbr-linux" => Ok(CcKind::BbrLinux),
            other => Err(crate::error::ParamError {
                name: "cc",
                reason: format!("cc '{other}' for QUIC: expected {CC_VALUES}"),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CcKind::NewReno => "newreno",
            CcKind::Cubic => "cubic",
            CcKind::Bbr => "bbr",
            CcKind::BbrLinux => "bbr-linux",
        }
    }

    /// Whether a `+floor` clock reaches this controller's RTT samples.
    pub fn takes_the_floor(self) -> bool {
        self == CcKind::BbrLinux
    }

    fn build(self, now: Instant, mtu: u16, factory: &ObservingFactory) -> Box<dyn Controller> {
        match self {
            CcKind::NewReno => Box::new(NewReno::new(Arc::new(NewRenoConfig::default()), now, mtu)),
            CcKind::Cubic => Box::new(Cubic::new(Arc::new(CubicConfig::default()), now, mtu)),
            CcKind::Bbr => Box::new(Bbr::new(Arc::new(BbrConfig::default()), mtu)),
            CcKind::BbrLinux => {
                let mode = factory.clock.mode();
                let config = BbrLinuxConfig {
                    tick_floor: if mode.floors_rtt() { mode.tick() } else { None },
                    gso_max_segs: factory.gso_max_segs,
                    seed: 0x5eed,
                };
                Box::new(BbrLinux::new(
                    config,
                    now,
                    mtu,
                    factory.record.bbr_linux.clone(),
                ))
            }
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
    /// What a bbr-linux controller ended with.
    bbr_linux: Arc<BbrLinuxTrace>,
}

/// A snapshot of a [`SampleRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleCounts {
    pub samples: u64,
    pub zero: u64,
    pub floored: u64,
    pub min_floored: Option<Duration>,
    pub bbr_linux: Option<BbrLinuxSummary>,
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
            bbr_linux: self.bbr_linux.summary(),
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
    /// Datagrams the path sends in one burst at most (bbr-linux's TSO goal).
    pub gso_max_segs: u64,
}

impl ControllerFactory for ObservingFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(ObservingController {
            inner: self.kind.build(now, current_mtu, &self),
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
        "{who}: {} acknowledged packets gave an RTT sample on the stack's clock, {} of them zero (sent and acknowledged within one tick)",
        counts.samples,
        counts.zero,
        who = who(kind)
    )];
    if clock.mode().floors_rtt() {
        notes.push(if kind.takes_the_floor() {
            format!(
                "clock {}: the floor reached the controller: bbr-linux counted {} zero RTT samples (and any zero rate interval) as one tick, as the talk's patch does in tcp_input.c and tcp_rate.c",
                clock.mode(),
                counts.floored
            )
        } else {
            format!(
                "clock {}: the floor cannot reach quinn-proto's {}: quinn-proto 0.11 folds each RTT sample into its private RttEstimator before calling the controller",
                clock.mode(),
                kind.name()
            )
        });
    }
    if let Some(linux) = counts.bbr_linux {
        notes.push(bbr_linux_note(&linux));
    }
    notes
}

fn who(kind: CcKind) -> String {
    match kind {
        CcKind::BbrLinux => "bbr-linux (Linux 4.9's BBR, osprobe's own)".to_string(),
        other => format!("quinn-proto {}", other.name()),
    }
}

/// Why bbr-linux ran at the rate it did: its min_rtt, window and estimate.
fn bbr_linux_note(linux: &BbrLinuxSummary) -> String {
    let min_rtt = linux
        .min_rtt
        .map_or("none".to_string(), |m| format!("{} us", m.as_micros()));
    format!(
        "bbr-linux at the end: mode {}, min_rtt {min_rtt}, window {} packets, bandwidth estimate {:.1} Mbit/s, pacing rate {:.1} Mbit/s (computed, not applied: quinn-proto paces by its own rule); {} of {} rate samples valid (a zero interval is none)",
        linux.mode,
        linux.cwnd_packets,
        linux.max_bw_bytes_per_sec as f64 * 8.0 / 1e6,
        linux.pacing_rate as f64 * 8.0 / 1e6,
        linux.valid_samples,
        linux.valid_samples + linux.invalid_samples
    )
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
            gso_max_segs: 1,
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
                bbr_linux: None,
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
        assert_eq!(CcKind::parse("bbr-linux").unwrap(), CcKind::BbrLinux);
        assert!(CcKind::BbrLinux.takes_the_floor() && !CcKind::Bbr.takes_the_floor());
        let err = CcKind::parse("vegas").unwrap_err().to_string();
        assert!(err.contains("'vegas'") && err.contains("bbr"), "{err}");
    }
}
