//! `cc=bbr-linux`: BBR v1 as Linux 4.9 has it (net/ipv4/tcp_bbr.c over
//! the delivery-rate samples of net/ipv4/tcp_rate.c), written as
//! osprobe's own quinn-proto [`Controller`], so that seed 001's finding can
//! be tried with the BBR the talk ran rather than quinn-proto's.
//!
//! Every time it reads is the stack clock's, as quinn-proto hands it in:
//! its RTT samples are its own (ACK arrival minus send time on that
//! clock), so on a 10 ms tick an ACK in the tick of its send is a zero
//! sample exactly as in LKL, and `min_rtt` becomes zero; its bandwidth is
//! tcp_rate.c's per-packet delivery rate; its window is
//! `bbr_target_cwnd`'s, whose BDP term vanishes with a zero min_rtt and
//! leaves three bursts (`3 * tso_segs_goal`, rounded up to even).
//! Under `tick:P+floor` the talk's patch acts here: a zero RTT sample, and
//! a zero rate interval, count as one tick.
//!
//! Where quinn-proto cannot do what Linux does, the nearest faithful
//! behaviour: quinn-proto paces with its own pacer (window over smoothed
//! RTT), so BBR's pacing rate is computed and reported but not applied;
//! losses are declared after the ACK that revealed them and count in the
//! next sample; a loss recovery lasts until a packet sent after it is
//! acknowledged (TCP: until `high_seq`); persistent congestion is an RTO.

mod minmax;
mod model;
mod rate;

pub use model::{BbrModel, CaState, Mode};
pub use rate::{DeliverySampler, RateSample};

use model::{AckContext, TCP_INIT_CWND};
use quinn_proto::congestion::{Controller, ControllerMetrics};
use quinn_proto::RttEstimator;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a `bbr-linux` controller is set up.
#[derive(Debug, Clone, Copy)]
pub struct BbrLinuxConfig {
    /// The talk's patch: zero RTT samples and intervals count as this.
    pub tick_floor: Option<Duration>,
    /// Datagrams the path sends in one burst at most (GSO); 1 without it.
    pub gso_max_segs: u64,
    /// Seeds the random start of probe_bw's gain cycle.
    pub seed: u32,
}

/// What the controller saw and ended with, for the outcome's notes.
#[derive(Debug)]
pub struct BbrLinuxTrace {
    min_rtt_us: AtomicU64,
    cwnd_packets: AtomicU64,
    max_bw_bytes_per_sec: AtomicU64,
    pacing_rate: AtomicU64,
    valid_samples: AtomicU64,
    invalid_samples: AtomicU64,
    mode: AtomicU64,
}

/// A snapshot of a [`BbrLinuxTrace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BbrLinuxSummary {
    pub min_rtt: Option<Duration>,
    pub cwnd_packets: u64,
    pub max_bw_bytes_per_sec: u64,
    pub pacing_rate: u64,
    pub valid_samples: u64,
    pub invalid_samples: u64,
    pub mode: &'static str,
}

impl Default for BbrLinuxTrace {
    fn default() -> BbrLinuxTrace {
        BbrLinuxTrace {
            min_rtt_us: AtomicU64::new(u64::MAX),
            cwnd_packets: AtomicU64::new(0),
            max_bw_bytes_per_sec: AtomicU64::new(0),
            pacing_rate: AtomicU64::new(0),
            valid_samples: AtomicU64::new(0),
            invalid_samples: AtomicU64::new(0),
            mode: AtomicU64::new(0),
        }
    }
}

const MODE_NAMES: [&str; 4] = ["startup", "drain", "probe_bw", "probe_rtt"];

impl BbrLinuxTrace {
    /// Whether a controller reported here at all.
    pub fn summary(&self) -> Option<BbrLinuxSummary> {
        let valid = self.valid_samples.load(Ordering::Relaxed);
        let invalid = self.invalid_samples.load(Ordering::Relaxed);
        if valid + invalid == 0 {
            return None;
        }
        let min = self.min_rtt_us.load(Ordering::Relaxed);
        let mode = self.mode.load(Ordering::Relaxed) as usize;
        Some(BbrLinuxSummary {
            min_rtt: (min != u64::MAX).then(|| Duration::from_micros(min)),
            cwnd_packets: self.cwnd_packets.load(Ordering::Relaxed),
            max_bw_bytes_per_sec: self.max_bw_bytes_per_sec.load(Ordering::Relaxed),
            pacing_rate: self.pacing_rate.load(Ordering::Relaxed),
            valid_samples: valid,
            invalid_samples: invalid,
            mode: MODE_NAMES.get(mode).copied().unwrap_or("?"),
        })
    }

    fn record(&self, model: &BbrModel, sample: &RateSample) {
        let valid = sample.delivered.is_some() && sample.interval_us.is_some_and(|i| i > 0);
        let counter = if valid {
            &self.valid_samples
        } else {
            &self.invalid_samples
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.min_rtt_us
            .store(model.min_rtt_us.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.cwnd_packets.store(model.cwnd, Ordering::Relaxed);
        self.max_bw_bytes_per_sec.store(
            model.rate_bytes_per_sec(model.max_bw(), model::BBR_UNIT),
            Ordering::Relaxed,
        );
        self.pacing_rate.store(model.pacing_rate, Ordering::Relaxed);
        let mode = match model.mode {
            Mode::Startup => 0,
            Mode::Drain => 1,
            Mode::ProbeBw => 2,
            Mode::ProbeRtt => 3,
        };
        self.mode.store(mode, Ordering::Relaxed);
    }
}

/// The controller quinn-proto drives.
#[derive(Debug, Clone)]
pub struct BbrLinux {
    /// The stack clock's instant the controller was built at: time zero.
    origin: Instant,
    tick_floor_us: Option<u64>,
    sampler: DeliverySampler,
    model: BbrModel,
    ca_state: CaState,
    /// When the current loss recovery began (us); it ends when a packet
    /// sent after that is acknowledged.
    recovery_start_us: Option<u64>,
    srtt_us: u64,
    trace: Arc<BbrLinuxTrace>,
}

impl BbrLinux {
    pub fn new(
        config: BbrLinuxConfig,
        now: Instant,
        mtu: u16,
        trace: Arc<BbrLinuxTrace>,
    ) -> BbrLinux {
        BbrLinux {
            origin: now,
            tick_floor_us: config
                .tick_floor
                .map(|t| u64::try_from(t.as_micros()).unwrap_or(u64::MAX)),
            sampler: DeliverySampler::default(),
            model: BbrModel::new(u64::from(mtu), config.gso_max_segs, config.seed),
            ca_state: CaState::Open,
            recovery_start_us: None,
            srtt_us: 0,
            trace,
        }
    }

    /// Microseconds since the controller was built, on the stack clock.
    fn micros(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    fn packets(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.model.mtu)
    }

    /// The model, for tests and notes.
    pub fn model(&self) -> &BbrModel {
        &self.model
    }

    /// One packet sent at `sent` was acknowledged at `now`; `srtt` is the
    /// stack's smoothed RTT.
    fn acked(&mut self, now: Instant, sent: Instant, srtt: Duration) {
        self.srtt_us = u64::try_from(srtt.as_micros()).unwrap_or(u64::MAX);
        let sent_us = self.micros(sent);
        self.sampler.on_acked(self.micros(now), sent_us);
        if self.ca_state != CaState::Open && self.recovery_start_us.is_some_and(|s| sent_us > s) {
            self.ca_state = CaState::Open;
        }
    }

    /// The ACK frame is done: its sample drives the model.
    fn end_acks(&mut self, now: Instant, in_flight_bytes: u64, app_limited: bool) {
        let now_us = self.micros(now);
        let Some(sample) = self.sampler.take_sample(now_us, self.tick_floor_us) else {
            return;
        };
        self.sampler.set_in_flight(self.packets(in_flight_bytes));
        let context = AckContext {
            now_us,
            delivered_us: now_us,
            delivered: self.sampler.delivered,
            in_flight: self.sampler.in_flight,
            ca_state: self.ca_state,
            srtt_us: self.srtt_us,
        };
        let probe_rtt_marks = self.model.on_sample(&sample, &context);
        if probe_rtt_marks || app_limited {
            self.sampler.on_app_limited();
        }
        self.trace.record(&self.model, &sample);
    }
}

impl Controller for BbrLinux {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        let packets = self.packets(bytes);
        self.sampler.on_sent(self.micros(now), packets);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        _bytes: u64,
        _app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.acked(now, sent, rtt.get());
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        self.end_acks(now, in_flight, app_limited);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        // BBR v1 does not react to ECN marks (lost_bytes 0).
        if lost_bytes == 0 {
            return;
        }
        let packets = self.packets(lost_bytes);
        self.sampler.on_lost(packets);
        let sent_us = self.micros(sent);
        if self.recovery_start_us.is_none_or(|start| sent_us > start) {
            // Entering recovery: bbr_ssthresh saves the window.
            self.model.save_cwnd();
            self.ca_state = CaState::Recovery;
            self.recovery_start_us = Some(self.micros(now));
        }
        if is_persistent_congestion {
            self.model.on_timeout();
            self.ca_state = CaState::Loss;
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.model.mtu = u64::from(new_mtu).max(1);
    }

    fn window(&self) -> u64 {
        self.model.cwnd * self.model.mtu
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut metrics = ControllerMetrics::default();
        metrics.congestion_window = self.window();
        metrics.pacing_rate = Some(self.model.pacing_rate.saturating_mul(8));
        metrics
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        TCP_INIT_CWND * self.model.mtu
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MTU: u64 = 1500;

    fn controller(floor: Option<Duration>) -> BbrLinux {
        let config = BbrLinuxConfig {
            tick_floor: floor,
            gso_max_segs: 1,
            seed: 1,
        };
        BbrLinux::new(
            config,
            Instant::now(),
            1500,
            Arc::new(BbrLinuxTrace::default()),
        )
    }

    /// A bulk sender that always fills its window, on a path whose real
    /// round trip is `rtt` and whose bottleneck serves a packet per us
    /// (12 Gbit/s), with the controller reading a clock that advances in
    /// steps of `tick`; real time moves in 10 us steps.
    fn simulate(c: &mut BbrLinux, tick: Duration, rtt: Duration, total: Duration) {
        let origin = c.origin;
        let tick_ns = tick.as_nanos().max(1);
        let stack_now = |real: Duration| {
            origin + Duration::from_nanos((real.as_nanos() / tick_ns * tick_ns) as u64)
        };
        let service = Duration::from_micros(1);
        // Each packet: when its ACK arrives (real time) and its send instant.
        let mut flight: VecDeque<(Duration, Instant)> = VecDeque::new();
        let mut last_served = Duration::ZERO;
        let mut real = Duration::ZERO;
        while real < total {
            let now = stack_now(real);
            let mut acked = false;
            while let Some(&(ack_at, sent)) = flight.front() {
                if real < ack_at {
                    break;
                }
                flight.pop_front();
                c.acked(now, sent, Duration::ZERO);
                acked = true;
            }
            if acked {
                c.end_acks(now, flight.len() as u64 * MTU, false);
            }
            let room = (c.window() / MTU).saturating_sub(flight.len() as u64);
            if room > 0 {
                c.on_sent(now, room * MTU, 0);
                for _ in 0..room {
                    last_served = last_served.max(real) + service;
                    flight.push_back((last_served + rtt, now));
                }
            }
            real += Duration::from_micros(10);
        }
    }

    #[test]
    fn on_a_10ms_tick_a_100us_path_leaves_bbr_three_packets_rounded_up_to_four() {
        let mut c = controller(None);
        simulate(
            &mut c,
            Duration::from_millis(10),
            Duration::from_micros(100),
            Duration::from_secs(1),
        );
        let model = c.model();
        assert_eq!(model.min_rtt_us, Some(0));
        assert!(model.full_bw_reached, "{model:?}");
        // Four packets, or six in the probing phase of the gain cycle.
        assert!(c.window() <= 6 * MTU, "{model:?}");
        let summary = c.trace.summary().unwrap();
        assert!(
            summary.invalid_samples > summary.valid_samples,
            "{summary:?}"
        );
    }

    #[test]
    fn the_floor_makes_min_rtt_a_tick_and_the_window_grows_past_the_collapse() {
        let mut c = controller(Some(Duration::from_millis(10)));
        simulate(
            &mut c,
            Duration::from_millis(10),
            Duration::from_micros(100),
            Duration::from_millis(300),
        );
        assert_eq!(c.model().min_rtt_us, Some(10_000));
        assert!(c.window() > 100 * MTU, "{:?}", c.model());
    }

    #[test]
    fn on_a_fine_clock_min_rtt_is_the_paths_round_trip() {
        let mut c = controller(None);
        simulate(
            &mut c,
            Duration::from_micros(1),
            Duration::from_micros(100),
            Duration::from_millis(50),
        );
        // The path's 100 us, plus a service time and the 10 us step.
        let min_rtt = c.model().min_rtt_us.unwrap();
        assert!((100..=120).contains(&min_rtt), "{min_rtt}");
        assert!(c.window() > 6 * MTU, "{:?}", c.model());
    }

    #[test]
    fn a_loss_enters_recovery_and_a_later_packets_ack_leaves_it() {
        let mut c = controller(None);
        let t0 = c.origin;
        let ms = Duration::from_millis(1);
        c.on_sent(t0, 20 * MTU, 0);
        for _ in 0..20 {
            c.acked(t0 + ms, t0, ms);
        }
        c.end_acks(t0 + ms, 0, false);
        c.on_sent(t0 + ms, 10 * MTU, 0);
        c.on_congestion_event(t0 + 2 * ms, t0 + ms, false, MTU);
        assert_eq!(c.ca_state, CaState::Recovery);
        // A packet sent before the recovery began does not end it.
        c.acked(t0 + 3 * ms, t0 + ms, ms);
        assert_eq!(c.ca_state, CaState::Recovery);
        c.on_sent(t0 + 3 * ms, MTU, 0);
        c.acked(t0 + 4 * ms, t0 + 3 * ms, ms);
        assert_eq!(c.ca_state, CaState::Open);
    }
}
