//! Token authentication for `osprobe serve --token SECRET`.
//!
//! The token never crosses the wire. Every connection starts with a fresh
//! 32-byte server nonce; the client proves it knows the token by sending
//! HMAC-SHA256(token, context || nonce), where the context string binds the
//! proof to its purpose (opening a session, or attaching stream n of session
//! s), so a proof observed on one connection is useless on another.

use crate::protocol::{hex, unhex};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What a proof is for; part of the MAC input.
#[derive(Debug, Clone, Copy)]
pub enum Purpose<'a> {
    Open,
    Attach { session: &'a str, stream: u32 },
}

fn mac(token: &str, nonce: &str, purpose: Purpose) -> HmacSha256 {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut mac = HmacSha256::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(b"osprobe-auth-v1\0");
    match purpose {
        Purpose::Open => mac.update(b"open\0"),
        Purpose::Attach { session, stream } => {
            mac.update(b"attach\0");
            mac.update(session.as_bytes());
            mac.update(&stream.to_be_bytes());
        }
    }
    mac.update(nonce.as_bytes());
    mac
}

/// The client's proof for `nonce`, as hex.
pub fn proof(token: &str, nonce: &str, purpose: Purpose) -> String {
    hex(&mac(token, nonce, purpose).finalize().into_bytes())
}

/// Whether `proof` (hex) was made with `token` for `nonce` and `purpose`.
/// The comparison takes the same time whatever the proof's content.
pub fn verify(token: &str, nonce: &str, purpose: Purpose, proof: &str) -> bool {
    match unhex(proof) {
        Some(bytes) => mac(token, nonce, purpose).verify_slice(&bytes).is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_right_token_is_accepted() {
        let p = proof("s3cret", NONCE, Purpose::Open);
        assert_eq!(p.len(), 64);
        assert!(verify("s3cret", NONCE, Purpose::Open, &p));
    }

    #[test]
    fn a_wrong_token_nonce_or_purpose_is_rejected() {
        let p = proof("s3cret", NONCE, Purpose::Open);
        assert!(!verify("s3cret!", NONCE, Purpose::Open, &p));
        assert!(!verify("", NONCE, Purpose::Open, &p));
        let other_nonce = NONCE.replace('0', "1");
        assert!(!verify("s3cret", &other_nonce, Purpose::Open, &p));
        let attach = Purpose::Attach {
            session: "ab",
            stream: 0,
        };
        assert!(!verify("s3cret", NONCE, attach, &p));
        let p0 = proof("s3cret", NONCE, attach);
        let attach1 = Purpose::Attach {
            session: "ab",
            stream: 1,
        };
        assert!(!verify("s3cret", NONCE, attach1, &p0));
        assert!(verify("s3cret", NONCE, attach, &p0));
    }

    #[test]
    fn garbage_proofs_are_rejected() {
        for bad in ["", "zz", "00", &"0".repeat(64), &"0".repeat(63)] {
            assert!(!verify("s3cret", NONCE, Purpose::Open, bad));
        }
    }

    #[test]
    fn known_answer() {
        // RFC 4231 test case 2 checks the HMAC-SHA256 primitive itself.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
