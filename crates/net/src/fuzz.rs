//! Entry points for fuzzing the decoders of bytes from a peer, shared by
//! the cargo-fuzz targets in `fuzz/` and the bounded mutation loop in
//! `tests/decoders.rs`. Each takes any bytes and must return without
//! panicking; where a decoder has an encoder, what decodes must encode and
//! decode back to the same value.

use crate::protocol::{encode, read_message, FrameError};

/// A stream of control-protocol frames, as a server or client reads them
/// from a connection: every frame that decodes round-trips.
pub fn frames(data: &[u8]) {
    let mut rest = data;
    while let Ok(message) = read_message(&mut rest) {
        match encode(&message) {
            Ok(frame) => {
                let back = read_message(&mut frame.as_slice())
                    .unwrap_or_else(|e| panic!("{message:?} encodes to a frame that fails: {e}"));
                assert_eq!(back, message, "a decoded frame round-trips");
            }
            // Re-encoding can be longer than the input (a number written
            // `1e2` comes back as `100.0`): refused, not wrong.
            Err(FrameError::TooLarge { .. }) => {}
            Err(e) => panic!("{message:?} decoded but does not encode: {e}"),
        }
    }
}

/// A packet received on an ICMP socket, read as a raw socket's (IPv4
/// header first) and as a datagram socket's (ICMP only).
pub fn echo_reply(data: &[u8]) {
    crate::icmp::fuzz_parse_echo_reply(data);
}

/// A UDP test datagram as the server's session port receives it: a header
/// that decodes writes back to the same bytes, and the receiver's counting
/// takes any header (sequence numbers and send times at their extremes).
pub fn udp_datagram(data: &[u8]) {
    let Some(header) = crate::modes::DatagramHeader::read(data) else {
        assert!(
            data.len() < crate::modes::UDP_HEADER,
            "a long enough datagram has a header"
        );
        return;
    };
    let mut back = [0u8; crate::modes::UDP_HEADER];
    header.write(&mut back);
    assert_eq!(
        &back[..],
        &data[..crate::modes::UDP_HEADER],
        "a header round-trips"
    );
    let mut counter = crate::modes::UdpCounter::default();
    counter.record(&header, data.len(), 0);
    counter.record(&header, data.len(), u64::MAX);
    assert!(counter.counts.jitter_ns.is_finite() && counter.counts.jitter_ns >= 0.0);
}
