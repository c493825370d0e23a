//! Entry points for fuzzing the decoders of bytes from a peer, shared by
//! the cargo-fuzz targets in `fuzz/` and the bounded mutation loop in
//! `tests/decoders.rs`. Each takes any bytes and must return without
//! panicking; what decodes must encode and decode back to the same value.

use crate::protocol::framing::FrameBuffer;
use crate::protocol::{
    decode_reply, decode_request, encode_reply, encode_request, printable, validate_name,
};

/// One request message, as the server reads a UDP datagram.
pub fn request(data: &[u8]) {
    let Ok((header, request)) = decode_request(data) else {
        return;
    };
    let mut out = Vec::new();
    encode_request(header.session, header.xid, &request, &mut out)
        .unwrap_or_else(|e| panic!("{request:?} decoded but does not encode: {e}"));
    let back = decode_request(&out)
        .unwrap_or_else(|e| panic!("{request:?} encodes to a message that fails: {e}"));
    assert_eq!(back, (header, request), "a decoded request round-trips");
}

/// One reply message, as the client reads it.
pub fn reply(data: &[u8]) {
    let Ok((header, op, result)) = decode_reply(data) else {
        return;
    };
    let mut out = Vec::new();
    encode_reply(header.session, header.xid, op, &result, &mut out)
        .unwrap_or_else(|e| panic!("{result:?} decoded but does not encode: {e}"));
    let back = decode_reply(&out)
        .unwrap_or_else(|e| panic!("{result:?} encodes to a message that fails: {e}"));
    assert_eq!(back, (header, op, result), "a decoded reply round-trips");
}

/// A TCP byte stream as the server frames it: the first byte sets the
/// size of the reads the stream arrives in, each whole frame is decoded as
/// a request, and a bad length ends the stream as it ends the connection.
pub fn tcp_stream(data: &[u8]) {
    let Some((&read_size, mut stream)) = data.split_first() else {
        return;
    };
    let read_size = usize::from(read_size).max(1);
    let mut frames = FrameBuffer::new();
    loop {
        let chunk = &stream[..read_size.min(stream.len())];
        let mut reader = chunk;
        let n = frames
            .fill(&mut reader)
            .expect("reading a slice cannot fail");
        stream = &stream[n..];
        loop {
            match frames.next_frame() {
                Ok(Some(body)) => request(body),
                Ok(None) => break,
                Err(()) => return,
            }
            frames.consume();
        }
        if n == 0 {
            return;
        }
    }
}

/// A name from a request or a directory listing: validated as a path
/// component and made printable for a terminal.
pub fn name(data: &[u8]) {
    let _ = validate_name(data);
    let shown = printable(data, 64);
    assert!(
        !shown.chars().any(char::is_control),
        "printable({data:?}) left a control character: {shown:?}"
    );
}
