//! Fuzz target: a packet from the TUN device (vnet header, GSO segmentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osprobe_link::fuzz::packet(data));
