//! Entry point for fuzzing [`crate::peer_text`], shared by the cargo-fuzz
//! target in `fuzz/` and the bounded mutation loop in `tests/decoders.rs`.
//! Takes any bytes and must return without panicking.

use crate::peer_text::{escape, escape_bytes};

/// Characters a terminal or a log reader must never receive from a peer:
/// controls (C0, DEL, C1) and the bidirectional overrides and isolates.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Bytes from a peer, escaped for a log line or a terminal as bytes and
/// (where they are UTF-8) as text: no unsafe character survives and the
/// result stays bounded by the cap, not by the input.
pub fn peer_text(data: &[u8]) {
    const CAP: usize = 16;
    // The longest escape of one character is `\u{10ffff}` (10 characters);
    // the cut marker adds `...(N more bytes)`.
    const BOUND: usize = CAP * 10 + 40;
    let mut shown = vec![escape_bytes(data, CAP)];
    if let Ok(text) = std::str::from_utf8(data) {
        shown.push(escape(text, CAP));
    }
    for out in shown {
        assert!(
            !out.chars().any(is_unsafe),
            "{data:?} escaped to {out:?}, which keeps an unsafe character"
        );
        assert!(
            out.chars().count() <= BOUND,
            "{} bytes escaped to {} characters",
            data.len(),
            out.chars().count()
        );
    }
}
