//! The bottleneck of one direction: a drop-tail FIFO queue in front of a
//! link that sends at a fixed rate or by a trace.
//!
//! At a fixed rate a packet of B bytes occupies the link for B * 8 / rate
//! seconds (its serialization time); it starts when it arrives or when the
//! packet in front of it has left, whichever is later. Sizes are IP packet
//! sizes: there is no link-layer framing, as in Mahimahi.
//!
//! The queue holds every packet that has arrived and not yet left,
//! including the one being sent. A packet that would make it exceed its
//! bound (in packets or bytes) is dropped on arrival: drop-tail.
//!
//! Departures are computed when a packet arrives. For a FIFO without
//! preemption that is exact, and it lets the forwarder keep one ordered
//! list of release times instead of simulating the link step by step.

use crate::parse::QueueLimit;
use crate::trace::TraceLink;
use std::collections::VecDeque;

/// What sets the pace of the link.
#[derive(Debug, Clone)]
pub enum Pace {
    /// A fixed rate in bits per second.
    Rate(u64),
    /// Mahimahi delivery opportunities.
    Trace(TraceLink),
}

/// The serialization time of `bytes` at `rate_bps`, rounded up to a whole
/// nanosecond.
pub fn serialization_ns(bytes: u64, rate_bps: u64) -> u64 {
    let bits = u128::from(bytes) * 8 * 1_000_000_000;
    bits.div_ceil(u128::from(rate_bps.max(1))) as u64
}

/// A packet's way through the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// When its last bit leaves the link.
    pub at_ns: u64,
    /// Time from arrival to departure (waiting plus its own sending).
    pub sojourn_ns: u64,
}

#[derive(Debug, Clone)]
pub struct Bottleneck {
    pace: Pace,
    limit: QueueLimit,
    /// Departure time and size of each packet not yet gone, oldest first.
    in_queue: VecDeque<(u64, u64)>,
    queued_bytes: u64,
    /// When the link is free again (rate pacing).
    free_at_ns: u64,
}

impl Bottleneck {
    pub fn new(pace: Pace, limit: QueueLimit) -> Bottleneck {
        Bottleneck {
            pace,
            limit,
            in_queue: VecDeque::new(),
            queued_bytes: 0,
            free_at_ns: 0,
        }
    }

    /// Offer a packet of `bytes` at `arrival_ns`: its departure, or None
    /// when the queue is full and it is dropped.
    pub fn offer(&mut self, arrival_ns: u64, bytes: u64) -> Option<Departure> {
        while let Some(&(departure, size)) = self.in_queue.front() {
            if departure > arrival_ns {
                break;
            }
            self.in_queue.pop_front();
            self.queued_bytes -= size;
        }
        let full = match self.limit {
            QueueLimit::Unlimited => false,
            QueueLimit::Packets(n) => self.in_queue.len() as u64 >= n,
            QueueLimit::Bytes(b) => self.queued_bytes + bytes > b,
        };
        if full {
            return None;
        }
        let at_ns = match &mut self.pace {
            Pace::Rate(bps) => {
                let start = arrival_ns.max(self.free_at_ns);
                self.free_at_ns = start + serialization_ns(bytes, *bps);
                self.free_at_ns
            }
            Pace::Trace(link) => link.departure(arrival_ns, bytes.min(u64::from(u32::MAX)) as u32),
        };
        self.in_queue.push_back((at_ns, bytes));
        self.queued_bytes += bytes;
        Some(Departure {
            at_ns,
            sojourn_ns: at_ns - arrival_ns,
        })
    }

    /// Packets in the queue as of the last offer.
    pub fn queued_packets(&self) -> usize {
        self.in_queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Trace;
    use std::sync::Arc;

    #[test]
    fn serialization_time_is_bits_over_rate() {
        // 1500 bytes = 12,000 bits: 120 us at 100 Mbit/s, 12 us at 1 Gbit/s.
        assert_eq!(serialization_ns(1500, 100_000_000), 120_000);
        assert_eq!(serialization_ns(1500, 1_000_000_000), 12_000);
        assert_eq!(serialization_ns(1500, 50_000_000), 240_000);
        // 40 bytes at 10 kbit/s: 32 ms.
        assert_eq!(serialization_ns(40, 10_000), 32_000_000);
        // Rounded up: 1 byte at 3 bit/s is 2.666... s.
        assert_eq!(serialization_ns(1, 3), 2_666_666_667);
    }

    #[test]
    fn back_to_back_packets_leave_one_serialization_apart() {
        let mut b = Bottleneck::new(Pace::Rate(100_000_000), QueueLimit::Unlimited);
        let t0 = 1_000_000;
        let d: Vec<Departure> = (0..4).map(|_| b.offer(t0, 1500).unwrap()).collect();
        for (i, dep) in d.iter().enumerate() {
            let expected = t0 + 120_000 * (i as u64 + 1);
            assert_eq!(dep.at_ns, expected);
            assert_eq!(dep.sojourn_ns, expected - t0);
        }
        // After the link drained, a packet waits only for itself.
        let later = t0 + 10_000_000;
        assert_eq!(
            b.offer(later, 1500).unwrap(),
            Departure {
                at_ns: later + 120_000,
                sojourn_ns: 120_000
            }
        );
    }

    #[test]
    fn a_packet_bound_drops_the_tail() {
        let mut b = Bottleneck::new(Pace::Rate(12_000_000), QueueLimit::Packets(3));
        // 1 ms per 1500-byte packet. Three fit, the fourth is dropped.
        let results: Vec<bool> = (0..4).map(|_| b.offer(0, 1500).is_some()).collect();
        assert_eq!(results, vec![true, true, true, false]);
        assert_eq!(b.queued_packets(), 3);
        // At 1 ms the first has left: room for one more, which leaves at
        // 4 ms (after the three ahead).
        assert_eq!(b.offer(1_000_000, 1500).unwrap().at_ns, 4_000_000);
        assert!(b.offer(1_000_000, 1500).is_none());
    }

    #[test]
    fn a_byte_bound_counts_bytes() {
        let mut b = Bottleneck::new(Pace::Rate(8_000_000), QueueLimit::Bytes(3000));
        assert!(b.offer(0, 1500).is_some());
        assert!(b.offer(0, 1000).is_some());
        // 2500 queued: 600 more would exceed 3000, 500 fits.
        assert!(b.offer(0, 600).is_none());
        assert!(b.offer(0, 500).is_some());
        assert!(b.offer(0, 1).is_none());
    }

    #[test]
    fn sustained_overload_delivers_exactly_the_rate() {
        // Offer 2x the rate for one simulated second with a 100-packet
        // queue: what gets through is the rate, what is dropped the rest.
        let rate = 50_000_000u64;
        let mut b = Bottleneck::new(Pace::Rate(rate), QueueLimit::Packets(100));
        let gap = serialization_ns(1500, rate) / 2;
        let mut delivered_by_1s = 0u64;
        for i in 0..(1_000_000_000 / gap) {
            if let Some(d) = b.offer(i * gap, 1500) {
                if d.at_ns <= 1_000_000_000 {
                    delivered_by_1s += 1500 * 8;
                }
            }
        }
        let achieved = delivered_by_1s as f64;
        assert!(
            (achieved - rate as f64).abs() <= 1500.0 * 8.0,
            "{achieved} bit/s"
        );
    }

    #[test]
    fn trace_pacing_goes_through_the_queue() {
        let trace = Arc::new(Trace::parse("1\n", "t").unwrap());
        let mut b = Bottleneck::new(
            Pace::Trace(TraceLink::new(trace, 0)),
            QueueLimit::Packets(2),
        );
        assert_eq!(b.offer(0, 1500).unwrap().at_ns, 1_000_000);
        assert_eq!(b.offer(0, 1500).unwrap().at_ns, 2_000_000);
        assert!(b.offer(0, 1500).is_none());
    }
}
