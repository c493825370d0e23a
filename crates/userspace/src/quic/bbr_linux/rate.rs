//! Delivery-rate samples as Linux's net/ipv4/tcp_rate.c takes them, on the
//! stack's clock: each packet remembers, when it is sent, how much had
//! been delivered and when; when it is acknowledged, the data delivered
//! since then over the longer of the send and the ACK intervals is one
//! sample of the path's rate. All counts are in packets and all times in
//! microseconds since the controller was built, as Linux keeps them.
//!
//! What quinn-proto hands a controller differs from what TCP hands BBR in
//! two ways, and the sampler bridges both:
//! - `on_sent` comes once per transmit (a batch of packets sent at one
//!   instant), so the delivery state is remembered per send instant, not
//!   per packet. Packets sent at one instant share that state, as they
//!   would in Linux, because the state changes only when ACKs arrive.
//! - `on_ack` comes per acknowledged packet with its send instant, then
//!   `on_end_acks` once per ACK frame: the frame is Linux's one ACK, and
//!   its sample is made at `on_end_acks`. Losses are declared after it, so
//!   they count in the next ACK's sample.

use std::collections::VecDeque;

/// What a packet carried away when it was sent (Linux keeps this in the
/// skb's `tx` block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SendState {
    sent_us: u64,
    delivered: u64,
    delivered_us: u64,
    first_tx_us: u64,
    app_limited: bool,
}

/// One ACK's sample (Linux's `struct rate_sample`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateSample {
    /// Packets delivered over the interval; `None`: no valid sample.
    pub delivered: Option<u64>,
    /// The interval; `None`: no valid sample.
    pub interval_us: Option<u64>,
    /// `delivered` at the send of the newest packet this ACK acknowledged.
    pub prior_delivered: u64,
    /// This ACK's RTT sample (now minus the newest acknowledged packet's
    /// send time), after the floor when there is one.
    pub rtt_us: Option<u64>,
    /// Packets this ACK acknowledged.
    pub acked: u64,
    /// Packets declared lost since the previous sample.
    pub losses: u64,
    /// Packets in flight before this ACK.
    pub prior_in_flight: u64,
    /// Whether the newest acknowledged packet was sent while the sender
    /// had nothing to send.
    pub is_app_limited: bool,
}

/// The packets of one ACK frame, gathered until `on_end_acks`.
#[derive(Debug, Clone, Default)]
struct AckBatch {
    acked: u64,
    prior_in_flight: u64,
    newest: Option<SendState>,
    /// The newest packet's send time and the ACK's arrival.
    rtt_us: Option<u64>,
}

/// How many send instants are remembered at most; older ones are packets
/// long lost or acknowledged.
const MAX_SEND_STATES: usize = 1 << 16;

/// The sampler's state (Linux keeps it in `tcp_sock`).
#[derive(Debug, Clone, Default)]
pub struct DeliverySampler {
    /// Packets delivered so far (`tp->delivered`).
    pub delivered: u64,
    /// When the last packet was delivered (`tp->delivered_mstamp`).
    delivered_us: u64,
    /// Send time of the newest packet acknowledged (`tp->first_tx_mstamp`).
    first_tx_us: u64,
    /// Non-zero: samples are app-limited until `delivered` passes it.
    app_limited_until: u64,
    /// Packets in flight, as this sampler counts them.
    pub in_flight: u64,
    /// The stack's own minimum RTT (`tcp_min_rtt`), from unfloored samples.
    pub stack_min_rtt_us: Option<u64>,
    sends: VecDeque<SendState>,
    batch: AckBatch,
    pending_losses: u64,
}

impl DeliverySampler {
    /// `packets` left at `now_us` (`tcp_rate_skb_sent`).
    pub fn on_sent(&mut self, now_us: u64, packets: u64) {
        if self.in_flight == 0 {
            // The first packet of a flight starts both intervals afresh.
            self.first_tx_us = now_us;
            self.delivered_us = now_us;
        }
        let state = SendState {
            sent_us: now_us,
            delivered: self.delivered,
            delivered_us: self.delivered_us,
            first_tx_us: self.first_tx_us,
            app_limited: self.app_limited_until != 0,
        };
        if self.sends.back() != Some(&state) {
            if self.sends.len() == MAX_SEND_STATES {
                self.sends.pop_front();
            }
            self.sends.push_back(state);
        }
        self.in_flight += packets;
    }

    /// One packet sent at `sent_us` was acknowledged at `now_us`
    /// (`tcp_rate_skb_delivered`, for the packet that matters: the newest).
    pub fn on_acked(&mut self, now_us: u64, sent_us: u64) {
        if self.batch.acked == 0 {
            self.batch.prior_in_flight = self.in_flight;
        }
        self.batch.acked += 1;
        self.delivered += 1;
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(state) = self.state_at(sent_us) else {
            return;
        };
        let newer = self.batch.newest.is_none_or(|n| state.sent_us >= n.sent_us);
        if newer {
            self.batch.newest = Some(SendState { sent_us, ..state });
            self.batch.rtt_us = Some(now_us.saturating_sub(sent_us));
            self.first_tx_us = sent_us;
            // Packets sent before this one and not yet acknowledged are
            // lost or reordered; their states go.
            let keep_from = self.sends.partition_point(|s| s.sent_us < state.sent_us);
            self.sends.drain(..keep_from);
        }
    }

    /// `packets` were declared lost.
    pub fn on_lost(&mut self, packets: u64) {
        self.pending_losses += packets;
        self.in_flight = self.in_flight.saturating_sub(packets);
    }

    /// The sender had nothing to send (`tcp_rate_check_app_limited`).
    pub fn on_app_limited(&mut self) {
        self.app_limited_until = (self.delivered + self.in_flight).max(1);
    }

    /// The connection's own count of packets in flight, which wins.
    pub fn set_in_flight(&mut self, packets: u64) {
        self.in_flight = packets;
    }

    /// The state the packet sent at `sent_us` carried: the last one
    /// remembered at or before that instant.
    fn state_at(&self, sent_us: u64) -> Option<SendState> {
        let after = self.sends.partition_point(|s| s.sent_us <= sent_us);
        after.checked_sub(1).map(|i| self.sends[i])
    }

    /// The ACK frame is complete: its sample (`tcp_rate_gen`). `tick_floor_us`
    /// is the talk's patch: a zero RTT sample, and a zero interval, count
    /// as one tick.
    pub fn take_sample(&mut self, now_us: u64, tick_floor_us: Option<u64>) -> Option<RateSample> {
        let batch = std::mem::take(&mut self.batch);
        let losses = std::mem::take(&mut self.pending_losses);
        if batch.acked == 0 && losses == 0 {
            return None;
        }
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        if batch.acked > 0 {
            self.delivered_us = now_us;
        }
        // tcp_ack_update_rtt sees the sample before the patch touches it.
        if let Some(rtt) = batch.rtt_us {
            self.stack_min_rtt_us = Some(self.stack_min_rtt_us.map_or(rtt, |m| m.min(rtt)));
        }
        let floor = |v: u64| match tick_floor_us {
            Some(tick) if v == 0 => tick,
            _ => v,
        };
        let mut sample = RateSample {
            rtt_us: batch.rtt_us.map(floor),
            acked: batch.acked,
            losses,
            prior_in_flight: batch.prior_in_flight,
            ..RateSample::default()
        };
        let Some(newest) = batch.newest else {
            return Some(sample);
        };
        sample.prior_delivered = newest.delivered;
        sample.is_app_limited = newest.app_limited;
        let send_us = newest.sent_us.saturating_sub(newest.first_tx_us);
        let ack_us = now_us.saturating_sub(newest.delivered_us);
        let interval = floor(send_us.max(ack_us));
        // An interval shorter than the path's minimum RTT is an ACK
        // compressed or a retransmit; Linux discards it.
        if interval < self.stack_min_rtt_us.unwrap_or(0) {
            return Some(sample);
        }
        sample.delivered = Some(self.delivered - newest.delivered);
        sample.interval_us = Some(interval);
        Some(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_what_was_delivered_since_the_send_over_the_longer_interval() {
        let mut s = DeliverySampler::default();
        // Ten packets at 0 us, acknowledged at 100 us.
        s.on_sent(0, 10);
        for _ in 0..10 {
            s.on_acked(100, 0);
        }
        let first = s.take_sample(100, None).unwrap();
        assert_eq!(first.delivered, Some(10));
        assert_eq!(first.interval_us, Some(100));
        assert_eq!(first.rtt_us, Some(100));
        assert_eq!(first.prior_in_flight, 10);
        // Ten more at 100 us (the flight is empty: both intervals restart),
        // acknowledged at 300 us: 10 packets over 200 us.
        s.on_sent(100, 10);
        for _ in 0..10 {
            s.on_acked(300, 100);
        }
        let second = s.take_sample(300, None).unwrap();
        assert_eq!(second.delivered, Some(10));
        assert_eq!(second.interval_us, Some(200));
        assert_eq!(second.prior_delivered, 10);
    }

    #[test]
    fn a_packet_without_a_remembered_send_counts_as_delivered_but_gives_no_rate() {
        let mut s = DeliverySampler::default();
        // Acknowledged without a send this sampler saw (sent before the
        // controller was built, or its state pruned as long lost).
        s.on_acked(500, 0);
        let sample = s.take_sample(500, None).unwrap();
        assert_eq!(sample.acked, 1);
        assert_eq!(sample.delivered, None);
        assert_eq!(sample.interval_us, None);
        assert_eq!(s.delivered, 1);
    }

    #[test]
    fn the_send_interval_counts_from_the_flights_newest_acknowledged_packet() {
        let mut s = DeliverySampler::default();
        s.on_sent(0, 2);
        s.on_acked(1000, 0);
        s.take_sample(1000, None).unwrap();
        // Sent at 1000 us with one still in flight, so the intervals do not
        // restart: the send interval runs from the packet acknowledged at
        // 1000 us (sent at 0) to this send, 1000 us; the ACK interval from
        // the last delivery (1000 us) to 1200 us. The longer one counts.
        s.on_sent(1000, 1);
        s.on_acked(1200, 1000);
        let sample = s.take_sample(1200, None).unwrap();
        assert_eq!(sample.interval_us, Some(1000), "{sample:?}");
        assert_eq!(sample.delivered, Some(1));
        assert_eq!(sample.rtt_us, Some(200));
        assert_eq!(s.stack_min_rtt_us, Some(200));
    }

    #[test]
    fn on_a_coarse_clock_a_same_tick_ack_is_a_zero_rtt_and_the_floor_makes_it_one_tick() {
        let mut plain = DeliverySampler::default();
        plain.on_sent(10_000, 4);
        plain.on_acked(10_000, 10_000);
        let sample = plain.take_sample(10_000, None).unwrap();
        assert_eq!(sample.rtt_us, Some(0));
        // Zero interval: Linux's bbr_update_bw discards it (interval <= 0).
        assert_eq!(sample.interval_us, Some(0));

        let mut patched = DeliverySampler::default();
        patched.on_sent(10_000, 4);
        patched.on_acked(10_000, 10_000);
        let sample = patched.take_sample(10_000, Some(10_000)).unwrap();
        assert_eq!(sample.rtt_us, Some(10_000));
        assert_eq!(sample.interval_us, Some(10_000));
        // The stack's own minimum keeps the unpatched zero.
        assert_eq!(patched.stack_min_rtt_us, Some(0));
    }

    #[test]
    fn app_limited_sends_mark_their_samples_until_delivery_passes_them() {
        let mut s = DeliverySampler::default();
        s.on_sent(0, 2);
        s.on_app_limited();
        s.on_sent(50, 1);
        s.on_acked(100, 0);
        s.on_acked(100, 0);
        assert!(!s.take_sample(100, None).unwrap().is_app_limited);
        s.on_acked(150, 50);
        assert!(s.take_sample(150, None).unwrap().is_app_limited);
    }

    #[test]
    fn losses_count_in_the_next_sample() {
        let mut s = DeliverySampler::default();
        s.on_sent(0, 5);
        s.on_lost(2);
        let sample = s.take_sample(10, None).unwrap();
        assert_eq!(sample.losses, 2);
        assert_eq!(sample.acked, 0);
        assert_eq!(s.in_flight, 3);
    }
}
