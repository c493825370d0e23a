//! BBR v1's model and state machine as Linux 4.9's net/ipv4/tcp_bbr.c has
//! them: the windowed max bandwidth over 10 packet-timed rounds, the
//! min_rtt over 10 seconds, the four modes (startup, drain, probe_bw's
//! eight-phase gain cycle, probe_rtt) and the window `bbr_target_cwnd`
//! gives, in Linux's fixed point (bandwidth in packets per microsecond
//! << 24, gains << 8) so that hand-computed cases from tcp_bbr.c hold
//! exactly.
//!
//! Left out, and why: the long-term ("policer") bandwidth estimate (it
//! acts only at 20% loss or more over several rounds, which no osprobe
//! path sets), and the restart after idle (a bulk transfer never idles).
//! The pacing rate is computed as Linux computes it and reported, but
//! quinn-proto paces with its own pacer (window over smoothed RTT); see
//! docs/userspace-quic.md.

use super::minmax::WindowedMax;
use super::rate::RateSample;

pub const BW_SCALE: u32 = 24;
pub const BW_UNIT: u64 = 1 << BW_SCALE;
pub const BBR_SCALE: u32 = 8;
pub const BBR_UNIT: u64 = 1 << BBR_SCALE;

/// 2/ln(2): the smallest gain that doubles the sending rate each round.
pub const HIGH_GAIN: u64 = BBR_UNIT * 2885 / 1000 + 1;
/// 1/HIGH_GAIN: drains startup's queue in about one round.
pub const DRAIN_GAIN: u64 = BBR_UNIT * 1000 / 2885;
pub const CWND_GAIN: u64 = BBR_UNIT * 2;
/// probe_bw's pacing gains: probe, drain, then six rounds at the estimate.
pub const PACING_GAIN: [u64; CYCLE_LEN] = [
    BBR_UNIT * 5 / 4,
    BBR_UNIT * 3 / 4,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
];
pub const CYCLE_LEN: usize = 8;
const CYCLE_RAND: u32 = 7;
/// The bandwidth filter's window, in rounds.
const BW_RTTS: u32 = CYCLE_LEN as u32 + 2;
const MIN_RTT_WINDOW_US: u64 = 10_000_000;
const PROBE_RTT_MODE_US: u64 = 200_000;
/// Below this pacing rate (bits/s) a TSO burst is one segment.
const MIN_TSO_RATE: u64 = 1_200_000;
pub const CWND_MIN_TARGET: u64 = 4;
const FULL_BW_THRESH: u64 = BBR_UNIT * 5 / 4;
const FULL_BW_COUNT: u32 = 3;
pub const TCP_INIT_CWND: u64 = 10;
/// tcp_tso_autosize's byte bound: GSO_MAX_SIZE - 1 - MAX_TCP_HEADER
/// (x86-64).
const TSO_MAX_BYTES: u64 = 65_536 - 1 - 320;

/// BBR's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// TCP's congestion-avoidance states as BBR reads them (ordered as
/// Linux's `TCP_CA_*`: Open < Recovery < Loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CaState {
    Open,
    Recovery,
    Loss,
}

/// What the connection is doing when a sample arrives.
#[derive(Debug, Clone, Copy)]
pub struct AckContext {
    pub now_us: u64,
    /// When the last packet was delivered (`tp->delivered_mstamp`).
    pub delivered_us: u64,
    /// Packets delivered so far.
    pub delivered: u64,
    pub in_flight: u64,
    pub ca_state: CaState,
    /// The stack's smoothed RTT (0: none yet).
    pub srtt_us: u64,
}

/// BBR's state (Linux's `struct bbr`, plus the cwnd and pacing rate it
/// sets on the socket).
#[derive(Debug, Clone)]
pub struct BbrModel {
    pub mode: Mode,
    /// The congestion window, in packets.
    pub cwnd: u64,
    /// The pacing rate, bytes per second.
    pub pacing_rate: u64,
    /// `None`: no RTT sample yet (Linux's ~0U).
    pub min_rtt_us: Option<u64>,
    min_rtt_stamp_us: u64,
    probe_rtt_done_us: Option<u64>,
    probe_rtt_round_done: bool,
    bw: WindowedMax,
    pub rtt_count: u32,
    next_rtt_delivered: u64,
    cycle_stamp_us: u64,
    pub cycle_index: usize,
    pub pacing_gain: u64,
    pub cwnd_gain: u64,
    pub full_bw_reached: bool,
    full_bw_count: u32,
    full_bw: u64,
    prior_cwnd: u64,
    prev_ca_state: CaState,
    packet_conservation: bool,
    restore_cwnd: bool,
    round_start: bool,
    has_seen_rtt: bool,
    /// The packet size: the path's datagram size (Linux's MTU for rates,
    /// its MSS for TSO).
    pub mtu: u64,
    /// Packets the path sends in one burst at most (GSO); 1 without it.
    pub gso_max_segs: u64,
    rng: u32,
}

impl BbrModel {
    /// `bbr_init`: startup, the initial window, a pacing rate from the
    /// nominal 1 ms RTT.
    pub fn new(mtu: u64, gso_max_segs: u64, seed: u32) -> BbrModel {
        let mut model = BbrModel {
            mode: Mode::Startup,
            cwnd: TCP_INIT_CWND,
            pacing_rate: 0,
            min_rtt_us: None,
            min_rtt_stamp_us: 0,
            probe_rtt_done_us: None,
            probe_rtt_round_done: false,
            bw: WindowedMax::default(),
            rtt_count: 0,
            next_rtt_delivered: 0,
            cycle_stamp_us: 0,
            cycle_index: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            full_bw_reached: false,
            full_bw_count: 0,
            full_bw: 0,
            prior_cwnd: 0,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            restore_cwnd: false,
            round_start: false,
            has_seen_rtt: false,
            mtu: mtu.max(1),
            gso_max_segs: gso_max_segs.max(1),
            rng: seed | 1,
        };
        model.init_pacing_rate_from_rtt(0);
        model
    }

    /// The windowed max bandwidth, packets per us << BW_SCALE.
    pub fn max_bw(&self) -> u64 {
        self.bw.get()
    }

    /// A rate in bytes per second from a bandwidth and a gain.
    pub fn rate_bytes_per_sec(&self, bw: u64, gain: u64) -> u64 {
        let rate = (u128::from(bw) * u128::from(self.mtu) * u128::from(gain)) >> BBR_SCALE;
        u64::try_from((rate * 1_000_000) >> BW_SCALE).unwrap_or(u64::MAX)
    }

    fn init_pacing_rate_from_rtt(&mut self, srtt_us: u64) {
        let rtt_us = if srtt_us > 0 {
            self.has_seen_rtt = true;
            srtt_us
        } else {
            1000
        };
        let bw = self.cwnd * BW_UNIT / rtt_us;
        self.pacing_rate = self.rate_bytes_per_sec(bw, HIGH_GAIN);
    }

    fn set_pacing_rate(&mut self, bw: u64, gain: u64, srtt_us: u64) {
        let rate = self.rate_bytes_per_sec(bw, gain);
        if !self.has_seen_rtt && srtt_us > 0 {
            self.init_pacing_rate_from_rtt(srtt_us);
        }
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// Packets per TSO/GSO burst: about a millisecond at the pacing rate,
    /// at least one or two, at most what the path sends at once.
    pub fn tso_segs_goal(&self) -> u64 {
        let min_segs = if self.pacing_rate < MIN_TSO_RATE >> 3 {
            1
        } else {
            2
        };
        let bytes = (self.pacing_rate >> 10).min(TSO_MAX_BYTES);
        (bytes / self.mtu)
            .max(min_segs)
            .min(self.gso_max_segs)
            .min(0x7F)
    }

    /// `bbr_target_cwnd`: the window for `bw` at `gain`, in packets. With
    /// a min_rtt of zero the BDP term vanishes and three bursts remain.
    pub fn target_cwnd(&self, bw: u64, gain: u64) -> u64 {
        let Some(min_rtt) = self.min_rtt_us else {
            return TCP_INIT_CWND;
        };
        let bdp = u128::from(bw) * u128::from(min_rtt);
        let scaled = (bdp * u128::from(gain)) >> BBR_SCALE;
        let mut cwnd = u64::try_from(scaled.div_ceil(u128::from(BW_UNIT))).unwrap_or(u64::MAX / 4);
        cwnd += 3 * self.tso_segs_goal();
        cwnd = (cwnd + 1) & !1;
        if self.mode == Mode::ProbeBw && gain > BBR_UNIT {
            cwnd += 2;
        }
        cwnd
    }

    /// `bbr_save_cwnd`: the window to come back to after recovery or
    /// probe_rtt.
    pub fn save_cwnd(&mut self) {
        if self.prev_ca_state < CaState::Recovery && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = self.cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
        }
    }

    /// An RTO: Linux's tcp_enter_loss leaves one packet's window.
    pub fn on_timeout(&mut self) {
        self.save_cwnd();
        self.cwnd = 1;
    }

    /// `bbr_main`: one ACK's sample updates the model, then the pacing
    /// rate and the window. Returns true when probe_rtt marks the samples
    /// app-limited (the caller's sampler does it).
    pub fn on_sample(&mut self, rs: &RateSample, ctx: &AckContext) -> bool {
        self.update_bw(rs, ctx);
        self.update_cycle_phase(rs, ctx);
        self.check_full_bw_reached(rs);
        self.check_drain(ctx);
        let mark_app_limited = self.update_min_rtt(rs, ctx);
        let bw = self.max_bw();
        self.set_pacing_rate(bw, self.pacing_gain, ctx.srtt_us);
        self.set_cwnd(rs, ctx, bw);
        mark_app_limited
    }

    fn update_bw(&mut self, rs: &RateSample, ctx: &AckContext) {
        self.round_start = false;
        let (Some(delivered), Some(interval)) = (rs.delivered, rs.interval_us) else {
            return;
        };
        if interval == 0 {
            return;
        }
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = ctx.delivered;
            self.rtt_count = self.rtt_count.wrapping_add(1);
            self.round_start = true;
            self.packet_conservation = false;
        }
        let bw = delivered * BW_UNIT / interval;
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw.update(BW_RTTS, self.rtt_count, bw);
        }
    }

    fn is_next_cycle_phase(&self, rs: &RateSample, ctx: &AckContext) -> bool {
        let elapsed = ctx.delivered_us.saturating_sub(self.cycle_stamp_us);
        let is_full_length = self.min_rtt_us.is_some_and(|m| elapsed > m);
        if self.pacing_gain == BBR_UNIT {
            return is_full_length;
        }
        let bw = self.max_bw();
        if self.pacing_gain > BBR_UNIT {
            return is_full_length
                && (rs.losses > 0 || rs.prior_in_flight >= self.target_cwnd(bw, self.pacing_gain));
        }
        is_full_length || rs.prior_in_flight <= self.target_cwnd(bw, BBR_UNIT)
    }

    fn advance_cycle_phase(&mut self, delivered_us: u64) {
        self.cycle_index = (self.cycle_index + 1) % CYCLE_LEN;
        self.cycle_stamp_us = delivered_us;
        self.pacing_gain = PACING_GAIN[self.cycle_index];
    }

    fn update_cycle_phase(&mut self, rs: &RateSample, ctx: &AckContext) {
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(rs, ctx) {
            self.advance_cycle_phase(ctx.delivered_us);
        }
    }

    fn reset_startup_mode(&mut self) {
        self.mode = Mode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    /// Enter probe_bw at a random phase other than the probing one.
    fn reset_probe_bw_mode(&mut self, delivered_us: u64) {
        self.mode = Mode::ProbeBw;
        self.pacing_gain = BBR_UNIT;
        self.cwnd_gain = CWND_GAIN;
        self.cycle_index = CYCLE_LEN - 1 - self.random_below(CYCLE_RAND) as usize;
        self.advance_cycle_phase(delivered_us);
    }

    fn reset_mode(&mut self, delivered_us: u64) {
        if self.full_bw_reached {
            self.reset_probe_bw_mode(delivered_us);
        } else {
            self.reset_startup_mode();
        }
    }

    /// A small xorshift: Linux's prandom_u32_max, reproducible per seed.
    fn random_below(&mut self, bound: u32) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 17;
        self.rng ^= self.rng << 5;
        self.rng % bound
    }

    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.full_bw_reached || !self.round_start || rs.is_app_limited {
            return;
        }
        let threshold = (self.full_bw * FULL_BW_THRESH) >> BBR_SCALE;
        if self.max_bw() >= threshold {
            self.full_bw = self.max_bw();
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        self.full_bw_reached = self.full_bw_count >= FULL_BW_COUNT;
    }

    fn check_drain(&mut self, ctx: &AckContext) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            self.pacing_gain = DRAIN_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.mode == Mode::Drain && ctx.in_flight <= self.target_cwnd(self.max_bw(), BBR_UNIT) {
            self.reset_probe_bw_mode(ctx.delivered_us);
        }
    }

    /// `bbr_update_min_rtt`, with probe_rtt; true when probe_rtt wants the
    /// samples marked app-limited.
    fn update_min_rtt(&mut self, rs: &RateSample, ctx: &AckContext) -> bool {
        let expired = ctx.now_us > self.min_rtt_stamp_us + MIN_RTT_WINDOW_US;
        if let Some(rtt) = rs.rtt_us {
            if self.min_rtt_us.is_none_or(|m| rtt <= m) || expired {
                self.min_rtt_us = Some(rtt);
                self.min_rtt_stamp_us = ctx.now_us;
            }
        }
        if expired && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = BBR_UNIT;
            self.cwnd_gain = BBR_UNIT;
            self.save_cwnd();
            self.probe_rtt_done_us = None;
        }
        if self.mode != Mode::ProbeRtt {
            return false;
        }
        match self.probe_rtt_done_us {
            None if ctx.in_flight <= CWND_MIN_TARGET => {
                self.probe_rtt_done_us = Some(ctx.now_us + PROBE_RTT_MODE_US);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = ctx.delivered;
            }
            Some(done) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && ctx.now_us > done {
                    self.min_rtt_stamp_us = ctx.now_us;
                    self.restore_cwnd = true;
                    self.reset_mode(ctx.delivered_us);
                }
            }
            None => {}
        }
        true
    }

    /// `bbr_set_cwnd_to_recover_or_restore`: the window after losses and
    /// on entering or leaving recovery; `Some` while conserving packets.
    fn recover_or_restore(&mut self, rs: &RateSample, ctx: &AckContext) -> (u64, bool) {
        let mut cwnd = self.cwnd;
        if rs.losses > 0 {
            cwnd = cwnd.saturating_sub(rs.losses).max(1);
        }
        let state = ctx.ca_state;
        if state == CaState::Recovery && self.prev_ca_state != CaState::Recovery {
            self.packet_conservation = true;
            self.next_rtt_delivered = ctx.delivered;
            cwnd = ctx.in_flight + rs.acked;
        } else if self.prev_ca_state >= CaState::Recovery && state < CaState::Recovery {
            self.restore_cwnd = true;
            self.packet_conservation = false;
        }
        self.prev_ca_state = state;
        if self.restore_cwnd {
            cwnd = cwnd.max(self.prior_cwnd);
            self.restore_cwnd = false;
        }
        if self.packet_conservation {
            return (cwnd.max(ctx.in_flight + rs.acked), true);
        }
        (cwnd, false)
    }

    fn set_cwnd(&mut self, rs: &RateSample, ctx: &AckContext, bw: u64) {
        if rs.acked == 0 {
            return;
        }
        let (mut cwnd, conserving) = self.recover_or_restore(rs, ctx);
        if !conserving {
            let target = self.target_cwnd(bw, self.cwnd_gain);
            if self.full_bw_reached {
                cwnd = (cwnd + rs.acked).min(target);
            } else if cwnd < target || ctx.delivered < TCP_INIT_CWND {
                cwnd += rs.acked;
            }
            cwnd = cwnd.max(CWND_MIN_TARGET);
        }
        self.cwnd = cwnd;
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(CWND_MIN_TARGET);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u64 = 1500;

    fn sample(delivered: u64, interval_us: u64, rtt_us: u64, acked: u64) -> RateSample {
        RateSample {
            delivered: Some(delivered),
            interval_us: Some(interval_us),
            prior_delivered: 0,
            rtt_us: Some(rtt_us),
            acked,
            losses: 0,
            prior_in_flight: 0,
            is_app_limited: false,
        }
    }

    fn context(now_us: u64, delivered: u64, in_flight: u64) -> AckContext {
        AckContext {
            now_us,
            delivered_us: now_us,
            delivered,
            in_flight,
            ca_state: CaState::Open,
            srtt_us: 0,
        }
    }

    #[test]
    fn the_gains_are_linuxs() {
        assert_eq!(HIGH_GAIN, 739);
        assert_eq!(DRAIN_GAIN, 88);
        assert_eq!(CWND_GAIN, 512);
        assert_eq!(PACING_GAIN[0], 320);
        assert_eq!(PACING_GAIN[1], 192);
    }

    #[test]
    fn with_a_min_rtt_of_zero_the_window_is_three_bursts_rounded_up_to_even() {
        let mut model = BbrModel::new(MTU, 1, 1);
        model.min_rtt_us = Some(0);
        // Without GSO a burst is one packet: 3, rounded up to 4, whatever
        // the bandwidth.
        assert_eq!(model.target_cwnd(1_000_000 * BW_UNIT, CWND_GAIN), 4);
        // With GSO of up to 44 packets and a high pacing rate (1 ms at the
        // rate exceeds 64 KB), a burst is 64 KB: 43 packets of 1500 B.
        let mut gso = BbrModel::new(MTU, 44, 1);
        gso.min_rtt_us = Some(0);
        gso.pacing_rate = 1_000_000_000;
        assert_eq!(gso.tso_segs_goal(), 43);
        assert_eq!(gso.target_cwnd(BW_UNIT, CWND_GAIN), 130);
    }

    #[test]
    fn the_window_is_gain_times_bdp_plus_the_bursts() {
        let mut model = BbrModel::new(MTU, 1, 1);
        // 1 packet per 10 us (150 MB/s) and 1 ms: a BDP of 100 packets;
        // twice that, plus 3 one-packet bursts, rounded up to even: 204.
        model.min_rtt_us = Some(1000);
        let bw = BW_UNIT / 10;
        assert_eq!(model.target_cwnd(bw, CWND_GAIN), 204);
        // Before any RTT sample: the initial window.
        model.min_rtt_us = None;
        assert_eq!(model.target_cwnd(bw, CWND_GAIN), TCP_INIT_CWND);
    }

    #[test]
    fn the_floor_gives_a_window_of_a_tick_of_bandwidth() {
        // One tick (10 ms) as min_rtt at 1 packet per 10 us: 1000 packets
        // per BDP, 2000 at the cwnd gain, plus 3.
        let mut model = BbrModel::new(MTU, 1, 1);
        model.min_rtt_us = Some(10_000);
        assert_eq!(model.target_cwnd(BW_UNIT / 10, CWND_GAIN), 2004);
    }

    #[test]
    fn a_zero_interval_is_no_bandwidth_sample() {
        let mut model = BbrModel::new(MTU, 1, 1);
        model.on_sample(&sample(10, 0, 0, 10), &context(0, 10, 0));
        assert_eq!(model.max_bw(), 0);
        assert_eq!(model.rtt_count, 0);
        // A zero RTT sample is taken as the minimum all the same.
        assert_eq!(model.min_rtt_us, Some(0));
    }

    #[test]
    fn startup_ends_after_three_rounds_without_growth_then_drain_then_probe_bw() {
        let mut model = BbrModel::new(MTU, 1, 7);
        let mut delivered = 0;
        let mut now = 0;
        for round in 0..8 {
            now += 1000;
            delivered += 100;
            let mut rs = sample(100, 1000, 1000, 100);
            rs.prior_delivered = delivered - 100;
            // Queue empty after the round: in flight small.
            model.on_sample(&rs, &context(now, delivered, 2));
            if round < 3 {
                assert_eq!(model.mode, Mode::Startup, "round {round}");
            }
        }
        assert!(model.full_bw_reached);
        assert_eq!(model.mode, Mode::ProbeBw);
        assert_eq!(model.cwnd_gain, CWND_GAIN);
    }

    #[test]
    fn probe_bw_cycles_its_gains_after_a_min_rtt_each() {
        let mut model = BbrModel::new(MTU, 1, 3);
        model.min_rtt_us = Some(1000);
        model.full_bw_reached = true;
        model.reset_probe_bw_mode(0);
        let start = model.cycle_index;
        // Linux starts anywhere but in the draining phase.
        assert_ne!(model.pacing_gain, PACING_GAIN[1]);
        // A phase at gain 1.0 lasts one min_rtt of delivery time.
        let mut now = 0;
        let mut seen = vec![model.pacing_gain];
        for _ in 0..CYCLE_LEN {
            now += 1001;
            let mut rs = sample(1, 1000, 1000, 1);
            // Enough in flight for the probing phase, little for draining.
            rs.prior_in_flight = if model.pacing_gain > BBR_UNIT {
                1000
            } else {
                0
            };
            model.on_sample(&rs, &context(now, 10, 1));
            seen.push(model.pacing_gain);
        }
        assert_eq!(model.cycle_index, start, "a whole cycle");
        assert!(seen.contains(&PACING_GAIN[0]) && seen.contains(&PACING_GAIN[1]));
    }

    #[test]
    fn recovery_conserves_packets_then_restores_the_prior_window() {
        let mut model = BbrModel::new(MTU, 1, 1);
        model.min_rtt_us = Some(1000);
        model.full_bw_reached = true;
        model.mode = Mode::ProbeBw;
        model.cwnd = 100;
        model.save_cwnd();
        let mut ctx = context(1000, 500, 40);
        ctx.ca_state = CaState::Recovery;
        // A packet per us: the target window is far above 100 packets.
        let mut rs = sample(1000, 1000, 1000, 2);
        rs.losses = 3;
        model.on_sample(&rs, &ctx);
        assert_eq!(model.cwnd, 42, "in flight plus acked");
        ctx.ca_state = CaState::Open;
        model.on_sample(&sample(1000, 1000, 1000, 2), &ctx);
        assert_eq!(model.cwnd, 102, "the prior window, plus what was acked");
    }
}
