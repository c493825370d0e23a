//! Fuzz target: a run's or a measurement's JSON as the store reads it back.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_store::fuzz::run_json(data));
