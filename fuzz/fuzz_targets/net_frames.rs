//! Fuzz target: control-protocol frames of `osprobe serve` (length prefix + JSON), back to back.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_net::fuzz::frames(data));
