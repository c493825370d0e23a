//! What the link emulator reads from outside never panics it: packets from
//! the TUN device (GSO super-packets included), trace files and link
//! parameters, each driven through valid seeds, every prefix of them and a
//! few thousand deterministic mutations (the bounded twin of the
//! cargo-fuzz targets in `fuzz/`).

use osprobe_core::testing::check_decoder;
use osprobe_link::fuzz;
use osprobe_link::segment::{VnetHeader, F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, VNET_HDR_LEN};

/// Mutations per decoder: a few thousand, well under a second each.
const CASES: usize = 4000;

/// A vnet header and a TCP/IPv4 packet with `payload` bytes and a
/// `tcp_header`-byte TCP header, cut into `mss`-byte segments if `gso`.
fn tun_packet(gso: bool, mss: u16, tcp_header: usize, payload: usize) -> Vec<u8> {
    let mut packet = vec![0u8; VNET_HDR_LEN];
    VnetHeader {
        flags: F_NEEDS_CSUM,
        gso_type: if gso { GSO_TCPV4 } else { GSO_NONE },
        hdr_len: (20 + tcp_header) as u16,
        gso_size: if gso { mss } else { 0 },
        csum_start: 20,
        csum_offset: 16,
    }
    .write(&mut packet);
    let total = 20 + tcp_header + payload;
    let mut ip = vec![0u8; total];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6; // TCP
    ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 6]);
    ip[20 + 12] = ((tcp_header / 4) as u8) << 4;
    ip[20 + 13] = 0x18; // PSH, ACK
    for (i, b) in ip[20 + tcp_header..].iter_mut().enumerate() {
        *b = i as u8;
    }
    packet.extend_from_slice(&ip);
    packet
}

#[test]
fn tun_packets_never_panic_and_segments_add_up() {
    let seeds = [
        tun_packet(true, 1448, 32, 4000),
        tun_packet(true, 100, 20, 250),
        tun_packet(true, 536, 60, 0),
        tun_packet(false, 0, 20, 100),
    ];
    check_decoder("link_packet", seeds, CASES, fuzz::packet);
}

#[test]
fn trace_files_never_panic_and_keep_fifo_order() {
    let seeds: [&[u8]; 5] = [
        b"1\n1\n2\n5\n",
        b"0\n0\n3\n",
        b"  7 \n\n12\n",
        b"1\n18446744073709551615\n",
        b"4611686018427387904\n9223372036854775807\n",
    ];
    check_decoder("link_trace", seeds, CASES, fuzz::trace);
}

#[test]
fn link_parameters_never_panic() {
    let seeds: [&[u8]; 10] = [
        b"50ms",
        b"1.5s",
        b"10mbit",
        b"1gbit",
        b"100kbyte",
        b"1%",
        b"ge:p=1%,r=25%,bad=100%,good=0%",
        b"100packets",
        b"64kb",
        b"0.001",
    ];
    check_decoder("link_arguments", seeds, CASES, fuzz::arguments);
}
