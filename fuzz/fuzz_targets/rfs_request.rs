//! Fuzz target: one rfs request datagram; what decodes round-trips.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_rfs::fuzz::request(data));
