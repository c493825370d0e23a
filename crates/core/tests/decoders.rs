//! Text from a peer is escaped safely whatever the bytes: driven through
//! valid seeds, every prefix and a few thousand deterministic mutations
//! (the bounded twin of the cargo-fuzz target in `fuzz/`).

use osprobe_core::testing::check_decoder;

#[test]
fn peer_text_never_panics_and_escapes_everything_unsafe() {
    let seeds: [&[u8]; 6] = [
        b"osprobe",
        b"\x1b[2J\x1b[31mforged\x1b[0m\nosprobe: fake log line\r",
        "r\u{e9}sum\u{e9} \u{202e}fdp.exe \u{2066}x\u{2069}".as_bytes(),
        b"\xff\xfe invalid \xc3\x28 utf-8 \xe2\x82",
        "\u{85}\u{9b}31m C1 controls \u{7f}".as_bytes(),
        &[b'a'; 300],
    ];
    check_decoder("core_peer_text", seeds, 4000, osprobe_core::fuzz::peer_text);
}
