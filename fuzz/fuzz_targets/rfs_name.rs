//! Fuzz target: a file name from a peer: validated and made printable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_rfs::fuzz::name(data));
