//! What osprobe sees of smoltcp's TCP from the packets it sends and
//! receives: RTT samples on the stack's clock, and retransmissions.
//!
//! smoltcp keeps its RTT estimator private (no srtt, no minimum, no count
//! of retransmissions in its API), so the device watches the segments go
//! by instead. Every segment carrying new sequence space is timed with the
//! timestamp smoltcp passed to the device (the stack's clock, so on a tick
//! clock the samples are whole ticks, as the stack's own are); an ACK that
//! covers timed segments gives one sample, from the newest of them.
//! Segments sent again are never timed (Karn's rule), and a retransmission
//! drops the timing of everything after it, whose ACK is now ambiguous.
//! The samples feed an RFC 6298 smoothed RTT and a minimum.

use smoltcp::wire::{IpProtocol, Ipv4Packet, TcpPacket};
use std::collections::VecDeque;
use std::time::Duration;

/// `a` before `b` in sequence space (RFC 1982 arithmetic).
fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// RTT statistics of the samples seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttStats {
    pub samples: u64,
    /// Samples that read zero: the ACK came within the tick its segment
    /// left in.
    pub zero_samples: u64,
    pub min: Option<Duration>,
    pub max: Option<Duration>,
    /// RFC 6298's smoothed RTT (alpha 1/8).
    pub srtt: Option<Duration>,
    rttvar: Duration,
}

impl RttStats {
    pub fn add(&mut self, sample: Duration) {
        self.samples += 1;
        if sample.is_zero() {
            self.zero_samples += 1;
        }
        self.min = Some(self.min.map_or(sample, |m| m.min(sample)));
        self.max = Some(self.max.map_or(sample, |m| m.max(sample)));
        self.srtt = Some(match self.srtt {
            None => {
                self.rttvar = sample / 2;
                sample
            }
            Some(srtt) => {
                self.rttvar = (self.rttvar * 3 + srtt.abs_diff(sample)) / 4;
                (srtt * 7 + sample) / 8
            }
        });
    }
}

/// The observer's state for one connection.
#[derive(Debug, Default)]
pub struct SegmentObserver {
    /// The end of the highest sequence space sent so far.
    highest_end: Option<u32>,
    /// Timed segments in sending order: (sequence end, stack time sent).
    timed: VecDeque<(u32, Duration)>,
    pub rtt: RttStats,
    /// Segments carrying sequence space that had been sent before.
    pub retransmits: u64,
    /// Segments carrying sequence space.
    pub data_segments: u64,
    /// Packets the device could not parse as IPv4/TCP (none expected).
    pub foreign_packets: u64,
}

impl SegmentObserver {
    /// A packet the stack sends, at stack time `now`.
    pub fn on_send(&mut self, now: Duration, packet: &[u8]) {
        let Some((seq, len, _)) = tcp_segment(packet) else {
            self.foreign_packets += 1;
            return;
        };
        if len == 0 {
            return;
        }
        self.data_segments += 1;
        let end = seq.wrapping_add(len);
        match self.highest_end {
            Some(highest) if seq_before(seq, highest) => {
                self.retransmits += 1;
                // Karn: whatever was timed from here on is ambiguous now.
                self.timed.retain(|&(e, _)| !seq_before(seq, e));
                if seq_before(highest, end) {
                    self.highest_end = Some(end);
                }
            }
            _ => {
                self.highest_end = Some(end);
                self.timed.push_back((end, now));
            }
        }
    }

    /// A packet the stack receives, at stack time `now`.
    pub fn on_receive(&mut self, now: Duration, packet: &[u8]) {
        let Some((_, _, Some(ack))) = tcp_segment(packet) else {
            return;
        };
        let mut newest = None;
        while let Some(&(end, sent)) = self.timed.front() {
            if seq_before(ack, end) {
                break;
            }
            newest = Some(sent);
            self.timed.pop_front();
        }
        if let Some(sent) = newest {
            self.rtt.add(now.saturating_sub(sent));
        }
    }
}

/// (sequence number, sequence length incl. SYN and FIN, ACK number if the
/// ACK flag is set) of an IPv4 TCP packet.
fn tcp_segment(packet: &[u8]) -> Option<(u32, u32, Option<u32>)> {
    let ip = Ipv4Packet::new_checked(packet).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let ack = tcp.ack().then(|| tcp.ack_number().0 as u32);
    Some((tcp.seq_number().0 as u32, tcp.segment_len() as u32, ack))
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{Ipv4Address, Ipv4Repr, TcpControl, TcpRepr, TcpSeqNumber};

    const MS: Duration = Duration::from_millis(1);

    /// A real IPv4/TCP packet as smoltcp would emit it.
    fn segment(seq: u32, payload: usize, ack: Option<u32>) -> Vec<u8> {
        let data = vec![7u8; payload];
        let tcp = TcpRepr {
            src_port: 1000,
            dst_port: 2000,
            control: TcpControl::None,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None, None, None],
            timestamp: None,
            payload: &data,
        };
        let src = Ipv4Address::new(198, 18, 0, 3);
        let dst = Ipv4Address::new(198, 18, 0, 6);
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut buf = vec![0u8; ip.buffer_len() + tcp.buffer_len()];
        let caps = ChecksumCapabilities::default();
        let mut packet = Ipv4Packet::new_unchecked(&mut buf);
        ip.emit(&mut packet, &caps);
        let mut tcp_packet = TcpPacket::new_unchecked(packet.payload_mut());
        tcp.emit(&mut tcp_packet, &src.into(), &dst.into(), &caps);
        buf
    }

    #[test]
    fn an_ack_gives_one_sample_from_its_newest_segment() {
        let mut o = SegmentObserver::default();
        o.on_send(Duration::ZERO, &segment(100, 1000, None));
        o.on_send(2 * MS, &segment(1100, 1000, None));
        o.on_send(3 * MS, &segment(2100, 1000, None));
        // Covers the first two: sampled from the second.
        o.on_receive(12 * MS, &segment(1, 0, Some(2100)));
        assert_eq!(o.rtt.samples, 1);
        assert_eq!(o.rtt.min, Some(10 * MS));
        // A duplicate ACK samples nothing.
        o.on_receive(13 * MS, &segment(1, 0, Some(2100)));
        assert_eq!(o.rtt.samples, 1);
        o.on_receive(23 * MS, &segment(1, 0, Some(3100)));
        assert_eq!(o.rtt.samples, 2);
        assert_eq!(o.rtt.max, Some(20 * MS));
        assert_eq!(o.rtt.srtt, Some((10 * MS * 7 + 20 * MS) / 8));
        assert_eq!(o.retransmits, 0);
        assert_eq!(o.data_segments, 3);
    }

    #[test]
    fn retransmissions_are_counted_and_never_timed() {
        let mut o = SegmentObserver::default();
        o.on_send(Duration::ZERO, &segment(100, 1000, None));
        o.on_send(Duration::ZERO, &segment(1100, 1000, None));
        // The first is sent again: nothing from it on can be timed.
        o.on_send(500 * MS, &segment(100, 1000, None));
        assert_eq!(o.retransmits, 1);
        o.on_receive(501 * MS, &segment(1, 0, Some(2100)));
        assert_eq!(o.rtt.samples, 0);
        // New data after it is timed again.
        o.on_send(501 * MS, &segment(2100, 1000, None));
        o.on_receive(511 * MS, &segment(1, 0, Some(3100)));
        assert_eq!(o.rtt.min, Some(10 * MS));
        // A pure ACK from the stack is neither data nor a retransmission.
        o.on_send(512 * MS, &segment(3100, 0, Some(5)));
        assert_eq!((o.data_segments, o.retransmits), (4, 1));
    }

    #[test]
    fn a_tick_clock_gives_zero_samples_and_they_are_counted() {
        let mut o = SegmentObserver::default();
        o.on_send(10 * MS, &segment(u32::MAX - 10, 1000, None));
        o.on_receive(10 * MS, &segment(1, 0, Some(989)));
        assert_eq!(o.rtt.samples, 1);
        assert_eq!(o.rtt.zero_samples, 1);
        assert_eq!(o.rtt.srtt, Some(Duration::ZERO));
        // Not a TCP packet at all.
        o.on_send(10 * MS, &[0x45, 0, 0]);
        assert_eq!(o.foreign_packets, 1);
    }
}
