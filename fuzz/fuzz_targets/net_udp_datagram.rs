//! Fuzz target: a UDP test datagram as a session's port receives it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_net::fuzz::udp_datagram(data));
