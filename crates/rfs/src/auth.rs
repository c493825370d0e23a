//! Token authentication for `rfs serve --token SECRET`.
//!
//! The token never crosses the wire. A session starts with the client's
//! `Hello` (carrying a 16-byte client nonce); the server answers `Welcome`
//! with a fresh 32-byte server nonce and the session id. The client then
//! sends `Auth` with HMAC-SHA256(token, context || server nonce || client
//! nonce || session id). An observer learns a proof that is good for that
//! one session only, and the server drops a session after one wrong proof,
//! so guessing costs a round trip per guess, and the guesser's address
//! then waits longer and longer before its next session
//! ([`crate::backoff`]).
//!
//! What this does not do: it authenticates the session's start, not each
//! request. Requests are bound to the session id (64 random bits) and, over
//! UDP, to the client's address, which stops blind spoofing but not an
//! attacker who can read and forge traffic on the path (the same position
//! as NFS with AUTH_SYS). Use a trusted network or a tunnel for that.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io;

type HmacSha256 = Hmac<Sha256>;

const CONTEXT: &[u8] = b"osprobe-rfs-auth-v1\0";

fn mac(token: &str, server_nonce: &[u8; 32], client_nonce: &[u8; 16], session: u64) -> HmacSha256 {
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut mac = HmacSha256::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(CONTEXT);
    mac.update(server_nonce);
    mac.update(client_nonce);
    mac.update(&session.to_be_bytes());
    mac
}

/// The client's proof for one session.
pub fn proof(
    token: &str,
    server_nonce: &[u8; 32],
    client_nonce: &[u8; 16],
    session: u64,
) -> [u8; 32] {
    mac(token, server_nonce, client_nonce, session)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `proof` was made with `token` for this session. Constant time in
/// the proof's content.
pub fn verify(
    token: &str,
    server_nonce: &[u8; 32],
    client_nonce: &[u8; 16],
    session: u64,
    proof: &[u8; 32],
) -> bool {
    mac(token, server_nonce, client_nonce, session)
        .verify_slice(proof)
        .is_ok()
}

pub use osprobe_core::random::os_random_bytes as random_bytes;

/// A random u64 that is never 0 (0 means "no session" on the wire).
pub fn random_nonzero_u64() -> io::Result<u64> {
    loop {
        let v = u64::from_be_bytes(random_bytes::<8>()?);
        if v != 0 {
            return Ok(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_token_nonces_and_session() {
        let sn = [7u8; 32];
        let cn = [9u8; 16];
        let p = proof("s3cret", &sn, &cn, 42);
        assert!(verify("s3cret", &sn, &cn, 42, &p));
        assert!(!verify("s3cret!", &sn, &cn, 42, &p));
        assert!(!verify("s3cret", &[8u8; 32], &cn, 42, &p));
        assert!(!verify("s3cret", &sn, &[8u8; 16], 42, &p));
        assert!(!verify("s3cret", &sn, &cn, 43, &p));
        assert!(!verify("s3cret", &sn, &cn, 42, &[0u8; 32]));
    }

    #[test]
    fn randomness_differs() {
        assert_ne!(random_bytes::<16>().unwrap(), random_bytes::<16>().unwrap());
        assert_ne!(random_nonzero_u64().unwrap(), 0);
    }
}
