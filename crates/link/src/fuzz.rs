//! Entry points for fuzzing what the emulator reads from outside, shared by
//! the cargo-fuzz targets in `fuzz/` and the bounded mutation loop in
//! `tests/decoders.rs`: packets from the TUN device (a virtio-net header
//! and an IP packet, possibly a GSO super-packet), trace files, and the
//! command line's link parameters. Each takes any bytes and must return
//! without panicking.

use crate::segment::{segment_tcp4, tcp4_checksum, wire_size, VnetHeader, VNET_HDR_LEN};
use crate::trace::{Trace, TraceLink};
use std::sync::Arc;

/// A packet read from the TUN device: sized for the bottleneck and cut
/// into segments; the segments add up to the size charged for it.
pub fn packet(data: &[u8]) {
    let Some(header) = VnetHeader::parse(data) else {
        return;
    };
    let ip = &data[VNET_HDR_LEN..];
    let (packets, bytes) = wire_size(&header, ip);
    let _ = tcp4_checksum(ip);
    let mut scratch = Vec::new();
    let (mut count, mut total) = (0u64, 0u64);
    let cut = segment_tcp4(data, &mut scratch, |segment| {
        assert!(segment.len() >= VNET_HDR_LEN, "a segment has its header");
        count += 1;
        total += (segment.len() - VNET_HDR_LEN) as u64;
        assert!(
            tcp4_checksum(&segment[VNET_HDR_LEN..]).is_some(),
            "a segment is TCP/IPv4"
        );
    });
    if let Ok(n) = cut {
        assert_eq!(n as u64, count, "the count returned is the count emitted");
        assert_eq!(
            (count, total),
            (packets, bytes),
            "the segments are what wire_size charged"
        );
    }
}

/// A trace file: parsed, then a link following it schedules packets
/// arriving from time 0 to the end of the clock; departures come in
/// arrival order, never before their arrival.
pub fn trace(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(trace) = Trace::parse(&text, "fuzz") else {
        return;
    };
    let mut link = TraceLink::new(Arc::new(trace), 1_000);
    let mut previous = 0;
    for (arrival, bytes) in [
        (0, 1),
        (1_000, 1500),
        (5_000_000, 65_535),
        (u64::MAX / 2, 1),
        (u64::MAX - 1, 1500),
        (u64::MAX, 65_535),
    ] {
        let departure = link.departure(arrival, bytes);
        assert!(
            departure >= arrival,
            "left at {departure} before arriving at {arrival}"
        );
        assert!(
            departure >= previous,
            "left at {departure} before {previous}"
        );
        previous = departure;
    }
}

/// A link parameter from the command line (`--delay 50ms`, `--rate
/// 10mbit`, `--loss 1%`, ...), read by every parser.
pub fn arguments(data: &[u8]) {
    use crate::parse;
    let text = String::from_utf8_lossy(data);
    let _ = parse::duration(&text);
    let _ = parse::probability(&text);
    let _ = parse::delay(&text);
    let _ = parse::rate(&text);
    let _ = parse::queue_limit(&text);
    let _ = parse::loss(&text);
}
