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
