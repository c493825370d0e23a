//! Fuzz target: an rfs TCP byte stream, framed as the server frames it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_rfs::fuzz::tcp_stream(data));
