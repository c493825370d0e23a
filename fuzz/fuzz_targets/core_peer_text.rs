//! Fuzz target: text from a peer, escaped for a log or a terminal.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_core::fuzz::peer_text(data));
