//! Fuzz target: a Mahimahi trace file and the departures it schedules.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_link::fuzz::trace(data));
