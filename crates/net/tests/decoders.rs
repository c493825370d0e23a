//! The decoders of bytes from a peer never panic: the control protocol's
//! frames and ICMP echo replies, each driven through its valid seeds, every
//! prefix of them and a few thousand deterministic mutations (the bounded
//! twin of the cargo-fuzz targets in `fuzz/`).

use osprobe_core::testing::check_decoder;
use osprobe_net::fuzz;
use osprobe_net::protocol::read_message;

/// Mutations per decoder: a few thousand, well under a second each.
const CASES: usize = 4000;

/// One frame: the 4-byte big-endian length and the JSON body.
fn frame(json: &str) -> Vec<u8> {
    let mut f = (json.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    f
}

/// A valid frame of every message and test kind, written as JSON text
/// (rather than built from the types) so that the seeds read like a
/// capture. When the protocol changes, `the_seeds_are_valid_frames` says
/// which seed to update.
fn frame_seeds() -> Vec<Vec<u8>> {
    let nonce = "ab".repeat(32);
    let proof = "cd".repeat(32);
    let session = "0f".repeat(16);
    let hash = "12".repeat(16);
    let open = |test: &str| {
        format!(r#"{{"type":"open","version":1,"proof":"{proof}","duration_s":10,"test":{test}}}"#)
    };
    let messages = [
        format!(
            r#"{{"type":"hello","protocol":"osprobe","version":1,"nonce":"{nonce}","auth_required":true,"max_duration_s":60}}"#
        ),
        open(r#"{"kind":"echo","streams":1,"size":64}"#),
        open(r#"{"kind":"sink","streams":4,"read_size":131072,"cpu":1}"#),
        open(
            r#"{"kind":"file","streams":2,"bytes":1048576,"packet":65536,"name":"a.bin","zero_copy":true}"#,
        ),
        open(r#"{"kind":"ack_stall","segment":1448,"quickack":false}"#),
        open(r#"{"kind":"source","streams":2,"write_size":131072,"duration_ms":1000,"cpu":1}"#),
        open(r#"{"kind":"udp_sink","size":64}"#),
        open(r#"{"kind":"crr","size":1}"#),
        format!(r#"{{"type":"opened","session":"{session}"}}"#),
        format!(r#"{{"type":"attach","session":"{session}","stream":3,"proof":null}}"#),
        r#"{"type":"attached"}"#.to_string(),
        format!(r#"{{"type":"finish","hashes":["{hash}",null]}}"#),
        format!(
            r#"{{"type":"report","streams":[{{"stream":0,"bytes":100,"elapsed_ns":5000,"cpu_ns":1000,"reads":2,"hash":"{hash}","stored":true,"tcp_info":{{"rtt_us":10,"cwnd":[1,2.5,null]}},"error":null}}]}}"#
        ),
        r#"{"type":"error","code":"busy","message":"server full \u001b[2J"}"#.to_string(),
        format!(r#"{{"type":"describe","version":2,"proof":"{proof}"}}"#),
        r#"{"type":"described","environment":{"hostname":"far","caches":[{"level":1,"kind":"Data","size_bytes":32768}],"vulnerabilities":{"spectre_v2":"Mitigation: Retpolines"},"cpu_mhz":2400.5},"nic":{"name":"veth1","address":"198.18.80.2","mtu":1500,"offloads":{"tso":true},"speed_mbps":10000}}"#.to_string(),
        r#"{"type":"report","streams":[{"stream":0,"bytes":640,"elapsed_ns":5000,"cpu_ns":0,"reads":10,"hash":null,"stored":null,"tcp_info":null,"error":null,"udp":{"datagrams":10,"bytes":640,"reordered":1,"highest":12,"jitter_ns":812.5}}]}"#.to_string(),
    ];
    let mut seeds: Vec<Vec<u8>> = messages.iter().map(|m| frame(m)).collect();
    // Two frames back to back, as on a connection.
    seeds.push([seeds[0].clone(), seeds[1].clone()].concat());
    seeds
}

#[test]
fn the_seeds_are_valid_frames() {
    for (i, seed) in frame_seeds().iter().enumerate() {
        let decoded = read_message(&mut seed.as_slice());
        assert!(
            decoded.is_ok(),
            "seed {i} ({}) no longer decodes: {:?}; update it to the protocol",
            String::from_utf8_lossy(&seed[4..]),
            decoded.err()
        );
    }
}

#[test]
fn control_frames_never_panic_and_round_trip() {
    check_decoder("net_frames", frame_seeds(), CASES, fuzz::frames);
}

/// The internet checksum of RFC 1071.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo reply with `payload`, its checksum filled in.
fn echo_reply(identifier: u16, sequence: u16, payload: &[u8]) -> Vec<u8> {
    let mut icmp = vec![0u8, 0, 0, 0];
    icmp.extend_from_slice(&identifier.to_be_bytes());
    icmp.extend_from_slice(&sequence.to_be_bytes());
    icmp.extend_from_slice(payload);
    let sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    icmp
}

/// `icmp` behind an IPv4 header with `options` (a multiple of 4 bytes).
fn with_ip_header(icmp: &[u8], options: &[u8]) -> Vec<u8> {
    let header = 20 + options.len();
    let total = (header + icmp.len()) as u16;
    let mut packet = vec![0x40 | (header / 4) as u8, 0];
    packet.extend_from_slice(&total.to_be_bytes());
    packet.extend_from_slice(&[0, 1, 0x40, 0, 64, 1, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
    packet.extend_from_slice(options);
    let sum = checksum(&packet);
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
    packet.extend_from_slice(icmp);
    packet
}

#[test]
fn icmp_echo_replies_never_panic() {
    let plain = echo_reply(0xbeef, 7, b"osprobe ping payload 0123456789");
    let seeds = vec![
        plain.clone(),
        echo_reply(1, 1, b""),
        with_ip_header(&plain, &[]),
        with_ip_header(&plain, &[1, 1, 1, 0]),
    ];
    check_decoder("net_echo_reply", seeds, CASES, fuzz::echo_reply);
}

#[test]
fn udp_test_datagrams_never_panic() {
    let mut datagram = vec![0x0f; 16];
    datagram.extend_from_slice(&7u64.to_be_bytes());
    datagram.extend_from_slice(&123_456_789u64.to_be_bytes());
    let mut padded = datagram.clone();
    padded.extend_from_slice(&[0xa5; 32]);
    let extremes = [0xffu8; 32].to_vec();
    check_decoder(
        "net_udp_datagram",
        vec![datagram, padded, extremes],
        CASES,
        fuzz::udp_datagram,
    );
}
