//! Fuzz target: one rfs reply; what decodes round-trips.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_rfs::fuzz::reply(data));
