//! Proof that a peer knows a shared token, without sending the token.
//!
//! A proof is HMAC-SHA256 keyed by the token over three things: a domain
//! label (what the proof is for: "open a serve session", "attach a stream"),
//! the server's fresh nonce (so a proof seen on one connection is useless on
//! another), and a context (the test the client asked for, the session and
//! stream it attaches; so a proof made for one request cannot be relayed by
//! a hostile server for another). Every part is length-prefixed before it
//! enters the MAC, so no two different (label, nonce, context) triples feed
//! the MAC the same bytes ("ab" + "c" is not "a" + "bc").
//!
//! [`verify`] compares in constant time: how long it takes says nothing
//! about how many bytes of a guess were right.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes in a proof (the SHA-256 output).
pub const PROOF_LEN: usize = 32;

fn mac(token: &[u8], label: &str, nonce: &[u8], context: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut mac = HmacSha256::new_from_slice(token)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    let mut part = |bytes: &[u8]| {
        mac.update(&(bytes.len() as u64).to_be_bytes());
        mac.update(bytes);
    };
    part(label.as_bytes());
    part(nonce);
    for piece in context {
        part(piece);
    }
    mac
}

/// The proof that the holder of `token` asks for `context` under `label`
/// on the connection whose server nonce is `nonce`.
pub fn sign(token: &[u8], label: &str, nonce: &[u8], context: &[&[u8]]) -> [u8; PROOF_LEN] {
    mac(token, label, nonce, context)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `proof` is [`sign`]'s output for these inputs; constant time in
/// the proof's content (a proof of the wrong length is simply wrong).
pub fn verify(token: &[u8], label: &str, nonce: &[u8], context: &[&[u8]], proof: &[u8]) -> bool {
    mac(token, label, nonce, context)
        .verify_slice(proof)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: [u8; 32] = [7; 32];

    #[test]
    fn a_proof_verifies_only_with_every_input_the_same() {
        let p = sign(b"s3cret", "open", &NONCE, &[b"spec A"]);
        assert!(verify(b"s3cret", "open", &NONCE, &[b"spec A"], &p));
        assert!(!verify(b"s3cret!", "open", &NONCE, &[b"spec A"], &p));
        assert!(!verify(b"s3cret", "attach", &NONCE, &[b"spec A"], &p));
        assert!(!verify(b"s3cret", "open", &[8; 32], &[b"spec A"], &p));
        assert!(!verify(b"s3cret", "open", &NONCE, &[b"spec B"], &p));
        assert!(!verify(b"s3cret", "open", &NONCE, &[], &p));
    }

    #[test]
    fn parts_cannot_be_shifted_between_fields() {
        let p = sign(b"k", "l", &NONCE, &[b"ab", b"c"]);
        assert!(!verify(b"k", "l", &NONCE, &[b"a", b"bc"], &p));
        assert!(!verify(b"k", "l", &NONCE, &[b"abc"], &p));
    }

    #[test]
    fn truncated_or_garbage_proofs_are_rejected() {
        let p = sign(b"k", "l", &NONCE, &[]);
        assert!(!verify(b"k", "l", &NONCE, &[], &p[..31]));
        assert!(!verify(b"k", "l", &NONCE, &[], &[]));
        assert!(!verify(b"k", "l", &NONCE, &[], &[0; 32]));
        let mut longer = p.to_vec();
        longer.push(0);
        assert!(!verify(b"k", "l", &NONCE, &[], &longer));
    }

    #[test]
    fn the_primitive_is_hmac_sha256() {
        // RFC 4231 test case 2, through the same crate and key handling.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let out: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(
            out[..4],
            [0x5b, 0xdc, 0xc1, 0x46],
            "HMAC-SHA256 known answer"
        );
        assert_eq!(out[28..], [0x64, 0xec, 0x38, 0x43]);
    }
}
