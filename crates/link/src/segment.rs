//! The virtio-net header the TUN devices carry, and TCP segmentation of the
//! large packets (GSO) the kernel hands over when offloads are on.
//!
//! # Why offloads
//!
//! A forwarder that moves 1500-byte packets one read(2) and one write(2) at
//! a time spends a few microseconds per packet; two vCPUs shared with the
//! sender and the receiver then top out near 1-2 Gbit/s. With IFF_VNET_HDR
//! and TUNSETOFFLOAD(TSO4) the kernel's TCP sends up to 64 KB per packet
//! into the TUN device, described by a virtio-net header (segment size,
//! where the checksum goes), exactly as it would to a NIC doing TSO. The
//! MTU stays 1500: what the "wire" carries is still 1500-byte packets.
//!
//! Delay treats a burst handed over at once like its segments, so such a
//! packet is forwarded whole and the receiving side gets it as one large
//! packet (as if GRO had merged it). Loss, rate and queues must see each
//! wire packet. For a rate or a queue the forwarder cuts it here into
//! MSS-sized segments; for loss alone it judges each segment and writes
//! the surviving runs of consecutive segments as smaller GSO packets
//! ([`GsoTcp4::run`]). Each segment or run gets its own IPv4 header (total length, identification
//! counting up, header checksum) and TCP header (sequence number advanced;
//! FIN and PSH only on the last segment, CWR only on the first), and is
//! written with a partial checksum (NEEDS_CSUM: the pseudo-header sum in
//! the checksum field, the kernel completes or skips it), the same contract
//! the kernel's own software GSO follows.
//!
//! Only TCP over IPv4 is offloaded (the link's addresses are IPv4); other
//! packets arrive as they are.

/// Size of `struct virtio_net_hdr` (no mergeable buffers).
pub const VNET_HDR_LEN: usize = 10;

pub const F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_ECN: u8 = 0x80;

const IPPROTO_TCP: u8 = 6;
/// Offset of the checksum in a TCP header.
const TCP_CSUM_OFFSET: u16 = 16;

/// `struct virtio_net_hdr`, in the host's byte order (the TUN device's
/// legacy default on a little-endian host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHeader {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHeader {
    pub fn parse(bytes: &[u8]) -> Option<VnetHeader> {
        let b = bytes.get(..VNET_HDR_LEN)?;
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHeader {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    pub fn write(&self, out: &mut [u8]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }

    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }
}

/// Headers of a TCP/IPv4 packet.
#[derive(Debug, Clone, Copy)]
struct Tcp4 {
    ip_header: usize,
    headers: usize,
}

fn tcp4_headers(ip: &[u8]) -> Option<Tcp4> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != IPPROTO_TCP {
        return None;
    }
    let ip_header = usize::from(ip[0] & 0x0f) * 4;
    if ip_header < 20 || ip.len() < ip_header + 20 {
        return None;
    }
    let tcp_header = usize::from(ip[ip_header + 12] >> 4) * 4;
    let headers = ip_header + tcp_header;
    (tcp_header >= 20 && ip.len() >= headers).then_some(Tcp4 { ip_header, headers })
}

/// How many packets of what total size a (possibly GSO) packet is on the
/// wire: (packets, bytes). `ip` is the IP packet after the vnet header.
pub fn wire_size(header: &VnetHeader, ip: &[u8]) -> (u64, u64) {
    if !header.is_gso() || header.gso_size == 0 {
        return (1, ip.len() as u64);
    }
    let Some(t) = tcp4_headers(ip) else {
        return (1, ip.len() as u64);
    };
    let payload = (ip.len() - t.headers) as u64;
    let segments = payload.div_ceil(u64::from(header.gso_size)).max(1);
    (
        segments,
        ip.len() as u64 + (segments - 1) * t.headers as u64,
    )
}

/// One's-complement sum of 16-bit big-endian words (odd tail padded).
fn ones_sum(bytes: &[u8], mut sum: u32) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for w in &mut chunks {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The IPv4 header checksum of `header` (its checksum field zeroed first).
pub fn ipv4_header_checksum(header: &mut [u8]) -> u16 {
    header[10] = 0;
    header[11] = 0;
    !fold(ones_sum(header, 0))
}

/// The partial TCP checksum a NEEDS_CSUM packet carries: the folded,
/// uncomplemented sum of the pseudo header (addresses, protocol, length).
fn pseudo_header_sum(ip: &[u8], tcp_len: usize) -> u16 {
    let mut sum = ones_sum(&ip[12..20], 0);
    sum += u32::from(IPPROTO_TCP);
    sum += tcp_len as u32;
    fold(sum)
}

/// The full TCP checksum of an IPv4 packet (for tests and for checking).
pub fn tcp4_checksum(ip: &[u8]) -> Option<u16> {
    let t = tcp4_headers(ip)?;
    let tcp = &ip[t.ip_header..];
    let mut sum = u32::from(pseudo_header_sum(ip, tcp.len()));
    // The checksum field counts as zero.
    sum = ones_sum(&tcp[..16], sum);
    sum = ones_sum(&tcp[18..], sum);
    Some(!fold(sum))
}

/// Why a packet was not cut (it is then forwarded whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentError {
    NotGso,
    NotTcp4,
}

/// A GSO TCP/IPv4 packet, checked once and cut into runs of its
/// segments on demand.
#[derive(Debug, Clone, Copy)]
pub struct GsoTcp4<'a> {
    header: VnetHeader,
    ip: &'a [u8],
    t: Tcp4,
    mss: usize,
    count: usize,
}

impl<'a> GsoTcp4<'a> {
    /// Check `packet` (vnet header + IP packet) is a GSO TCP/IPv4 packet.
    pub fn parse(packet: &'a [u8]) -> Result<GsoTcp4<'a>, SegmentError> {
        let header = VnetHeader::parse(packet).ok_or(SegmentError::NotGso)?;
        if !header.is_gso() || header.gso_size == 0 {
            return Err(SegmentError::NotGso);
        }
        if header.gso_type & !GSO_ECN != GSO_TCPV4 {
            return Err(SegmentError::NotTcp4);
        }
        let ip = &packet[VNET_HDR_LEN..];
        let t = tcp4_headers(ip).ok_or(SegmentError::NotTcp4)?;
        let mss = usize::from(header.gso_size);
        let count = (ip.len() - t.headers).div_ceil(mss).max(1);
        Ok(GsoTcp4 {
            header,
            ip,
            t,
            mss,
            count,
        })
    }

    /// How many wire segments it stands for.
    pub fn segments(&self) -> usize {
        self.count
    }

    /// The IP bytes segments `first..first + count` take on the wire.
    pub fn ip_bytes(&self, first: usize, count: usize) -> u64 {
        let payload = self.ip.len() - self.t.headers;
        let end = ((first + count) * self.mss).min(payload);
        let start = (first * self.mss).min(payload);
        (count * self.t.headers + (end - start)) as u64
    }

    /// Segments `first..first + count` as one packet in `out` (the vnet
    /// header, then the IP packet): a GSO packet when `count` > 1, a plain segment when 1.
    /// Each carries its own IPv4 header (total length, identification
    /// counting up from the first segment's, header checksum) and TCP
    /// header (sequence number advanced; FIN and PSH only if it ends with
    /// the last segment, CWR only if it starts with the first), and a
    /// partial checksum (NEEDS_CSUM: the pseudo-header sum in the checksum
    /// field, the kernel completes or skips it), the contract the kernel's
    /// own GSO follows.
    pub fn run(&self, first: usize, count: usize, out: &mut Vec<u8>) {
        assert!(
            count >= 1 && first + count <= self.count,
            "run out of range"
        );
        let (ip, t, mss) = (self.ip, self.t, self.mss);
        let payload = &ip[t.headers..];
        let chunk =
            &payload[(first * mss).min(payload.len())..((first + count) * mss).min(payload.len())];
        let run_header = if count > 1 {
            VnetHeader {
                flags: F_NEEDS_CSUM,
                gso_type: self.header.gso_type,
                hdr_len: t.headers as u16,
                gso_size: mss as u16,
                csum_start: t.ip_header as u16,
                csum_offset: TCP_CSUM_OFFSET,
            }
        } else {
            VnetHeader {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_NONE,
                hdr_len: 0,
                gso_size: 0,
                csum_start: t.ip_header as u16,
                csum_offset: TCP_CSUM_OFFSET,
            }
        };
        out.clear();
        out.resize(VNET_HDR_LEN, 0);
        run_header.write(&mut out[..VNET_HDR_LEN]);
        out.extend_from_slice(&ip[..t.headers]);
        out.extend_from_slice(chunk);
        let first_id = u16::from_be_bytes([ip[4], ip[5]]);
        let first_seq = u32::from_be_bytes(
            ip[t.ip_header + 4..t.ip_header + 8]
                .try_into()
                .expect("4 bytes"),
        );
        let seg = &mut out[VNET_HDR_LEN..];
        let total = seg.len();
        seg[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        seg[4..6].copy_from_slice(&first_id.wrapping_add(first as u16).to_be_bytes());
        let checksum = ipv4_header_checksum(&mut seg[..t.ip_header]);
        seg[10..12].copy_from_slice(&checksum.to_be_bytes());
        let tcp = t.ip_header;
        let seq = first_seq.wrapping_add((first * mss) as u32);
        seg[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
        let mut f = ip[t.ip_header + 13];
        if first + count < self.count {
            f &= !(0x01 | 0x08); // FIN, PSH: only with the last segment
        }
        if first > 0 {
            f &= !0x80; // CWR: only with the first
        }
        seg[tcp + 13] = f;
        let partial = pseudo_header_sum(seg, total - tcp);
        seg[tcp + 16..tcp + 18].copy_from_slice(&partial.to_be_bytes());
    }
}

/// Cut a GSO TCP/IPv4 packet (`packet` = vnet header + IP packet) into
/// wire-sized segments, each handed to `emit` as vnet header + IP packet.
/// Returns the number of segments.
pub fn segment_tcp4(
    packet: &[u8],
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, SegmentError> {
    let gso = GsoTcp4::parse(packet)?;
    for i in 0..gso.segments() {
        gso.run(i, 1, scratch);
        emit(scratch);
    }
    Ok(gso.segments())
}

/// The maximal runs of `true` in `keep`, as (first, count).
pub fn runs(keep: &[bool]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < keep.len() && !keep[i] {
            i += 1;
        }
        if i == keep.len() {
            return None;
        }
        let first = i;
        while i < keep.len() && keep[i] {
            i += 1;
        }
        Some((first, i - first))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 packet with `payload` bytes, flags, and a GSO header.
    fn gso_packet(payload: usize, mss: u16, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; VNET_HDR_LEN];
        VnetHeader {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        }
        .write(&mut p);
        let total = 20 + 32 + payload;
        let mut ip = vec![0u8; total];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
        ip[8] = 64;
        ip[9] = IPPROTO_TCP;
        ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 6]);
        ip[20..22].copy_from_slice(&5000u16.to_be_bytes());
        ip[22..24].copy_from_slice(&80u16.to_be_bytes());
        ip[24..28].copy_from_slice(&0xffff_ff00u32.to_be_bytes());
        ip[32] = 8 << 4; // 32-byte TCP header (timestamps)
        ip[33] = flags;
        for (i, b) in ip[52..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        p.extend_from_slice(&ip);
        p
    }

    #[test]
    fn headers_round_trip() {
        let h = VnetHeader {
            flags: 1,
            gso_type: GSO_TCPV4 | GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut b = [0u8; VNET_HDR_LEN];
        h.write(&mut b);
        assert_eq!(VnetHeader::parse(&b), Some(h));
        assert!(h.is_gso());
        assert!(!VnetHeader::default().is_gso());
        assert_eq!(VnetHeader::parse(&b[..4]), None);
    }

    #[test]
    fn segments_carry_the_payload_in_order_with_valid_headers() {
        let mss = 1448u16;
        let payload = 3 * 1448 + 100;
        let packet = gso_packet(payload, mss, 0x18 | 0x01 | 0x80); // PSH ACK FIN CWR
        let header = VnetHeader::parse(&packet).unwrap();
        assert_eq!(
            wire_size(&header, &packet[VNET_HDR_LEN..]),
            (4, (52 + payload) as u64 + 3 * 52)
        );
        let mut segments = Vec::new();
        let mut scratch = Vec::new();
        let n = segment_tcp4(&packet, &mut scratch, |s| segments.push(s.to_vec())).unwrap();
        assert_eq!(n, 4);
        let mut rebuilt = Vec::new();
        for (i, s) in segments.iter().enumerate() {
            let h = VnetHeader::parse(s).unwrap();
            assert_eq!(h.flags, F_NEEDS_CSUM);
            assert!(!h.is_gso());
            assert_eq!((h.csum_start, h.csum_offset), (20, 16));
            let ip = &s[VNET_HDR_LEN..];
            let len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(len, ip.len());
            assert!(len <= 1500, "{len}");
            // A valid header checksum sums to 0xffff.
            assert_eq!(fold(ones_sum(&ip[..20], 0)), 0xffff, "segment {i}");
            assert_eq!(
                u16::from_be_bytes([ip[4], ip[5]]),
                0xfffeu16.wrapping_add(i as u16)
            );
            let seq = u32::from_be_bytes(ip[24..28].try_into().unwrap());
            assert_eq!(seq, 0xffff_ff00u32.wrapping_add(i as u32 * 1448));
            let flags = ip[33];
            let last = i == 3;
            assert_eq!(flags & 0x01 != 0, last, "FIN on segment {i}");
            assert_eq!(flags & 0x08 != 0, last, "PSH on segment {i}");
            assert_eq!(flags & 0x80 != 0, i == 0, "CWR on segment {i}");
            assert_eq!(flags & 0x10, 0x10, "ACK kept");
            // Completing the partial checksum as the kernel would gives the
            // real TCP checksum.
            let partial = u16::from_be_bytes([ip[36], ip[37]]);
            let completed = !fold(ones_sum(&ip[20..], 0));
            let mut with_zero = ip.to_vec();
            with_zero[36] = 0;
            with_zero[37] = 0;
            assert_eq!(completed, tcp4_checksum(&with_zero).unwrap());
            assert_eq!(partial, pseudo_header_sum(ip, ip.len() - 20));
            rebuilt.extend_from_slice(&ip[52..]);
        }
        assert_eq!(rebuilt, packet[VNET_HDR_LEN + 52..].to_vec());
    }

    #[test]
    fn non_gso_and_non_tcp_are_left_alone() {
        let mut packet = gso_packet(100, 1448, 0x10);
        packet[1] = GSO_NONE;
        let mut scratch = Vec::new();
        assert_eq!(
            segment_tcp4(&packet, &mut scratch, |_| {}),
            Err(SegmentError::NotGso)
        );
        let h = VnetHeader::parse(&packet).unwrap();
        assert_eq!(wire_size(&h, &packet[VNET_HDR_LEN..]), (1, 152));
        let mut udp = gso_packet(3000, 1448, 0x10);
        udp[VNET_HDR_LEN + 9] = 17;
        assert_eq!(
            segment_tcp4(&udp, &mut scratch, |_| {}),
            Err(SegmentError::NotTcp4)
        );
    }

    #[test]
    fn runs_of_segments_are_gso_packets_of_just_those_segments() {
        let mss = 1000u16;
        let payload = 5 * 1000 + 300; // six segments, the last short
        let packet = gso_packet(payload, mss, 0x18 | 0x01 | 0x80);
        let gso = GsoTcp4::parse(&packet).unwrap();
        assert_eq!(gso.segments(), 6);
        // Segment 2 lost: runs 0..2 and 3..6.
        let keep = [true, true, false, true, true, true];
        let got: Vec<(usize, usize)> = runs(&keep).collect();
        assert_eq!(got, vec![(0, 2), (3, 3)]);
        let mut out = Vec::new();
        // Each run, cut again, gives exactly the original's segments.
        let mut singles = Vec::new();
        let mut scratch = Vec::new();
        segment_tcp4(&packet, &mut scratch, |s| singles.push(s.to_vec())).unwrap();
        for (first, count) in got {
            gso.run(first, count, &mut out);
            let h = VnetHeader::parse(&out).unwrap();
            assert!(h.is_gso());
            assert_eq!(h.gso_size, mss);
            let ip = &out[VNET_HDR_LEN..];
            assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), ip.len());
            assert_eq!(fold(ones_sum(&ip[..20], 0)), 0xffff);
            let flags = ip[33];
            assert_eq!(flags & 0x01 != 0, first + count == 6, "FIN");
            assert_eq!(flags & 0x80 != 0, first == 0, "CWR");
            let mut cut = Vec::new();
            segment_tcp4(&out, &mut scratch, |s| cut.push(s.to_vec())).unwrap();
            assert_eq!(cut.len(), count);
            for (i, c) in cut.iter().enumerate() {
                let original = &singles[first + i];
                // Same bytes, but the identification counts from the run's
                // first segment, which is the original's numbering too.
                assert_eq!(c, original, "segment {}", first + i);
            }
        }
        // A run of one is a plain segment.
        gso.run(2, 1, &mut out);
        assert!(!VnetHeader::parse(&out).unwrap().is_gso());
        assert_eq!(out, singles[2]);
        assert_eq!(runs(&[false, false]).count(), 0);
        assert_eq!(runs(&[true]).collect::<Vec<_>>(), vec![(0, 1)]);
    }

    #[test]
    fn ip_header_checksum_matches_a_known_packet() {
        // The classic example header (checksum 0xb861).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_header_checksum(&mut h), 0xb861);
    }
}
