//! Fuzz target: link parameters as typed on the command line.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_link::fuzz::arguments(data));
