//! Fuzz target: an ICMP echo reply as a raw or datagram socket receives it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_net::fuzz::echo_reply(data));
