//! Token authentication for `osprobe serve` (protocol version 2).
//!
//! The token never crosses the wire. Every connection starts with a fresh
//! 32-byte server nonce; the client proves it knows the token with
//! [`osprobe_core::proof`] (HMAC-SHA256) over a label naming the purpose,
//! the nonce and the request itself:
//! - opening a session covers the test spec and its duration, so a hostile
//!   server that relays a client's proof to a real one can only start the
//!   test the client asked for, not another (a bigger file, more streams);
//! - attaching covers the session id and the stream index.
//!
//! The protocol has no server identity (no server key pair), so the proof
//! cannot name the server; binding the addresses each side sees would break
//! behind NAT. The nonce and the request are what a proof is good for.

use crate::protocol::{hex, unhex, TestSpec};
use osprobe_core::proof;

const OPEN_LABEL: &str = "osprobe-serve-v2 open";
const ATTACH_LABEL: &str = "osprobe-serve-v2 attach";
const DESCRIBE_LABEL: &str = "osprobe-serve-v2 describe";

/// What a proof is for; part of the MAC input.
#[derive(Debug, Clone, Copy)]
pub enum Purpose<'a> {
    /// Open a session running `test` for `duration_s` seconds.
    Open { test: &'a TestSpec, duration_s: u32 },
    /// Join session `session` as stream `stream`.
    Attach { session: &'a str, stream: u32 },
    /// Ask the server to describe its machine and interface.
    Describe,
}

/// The MAC's (label, context) for `purpose`. The test spec enters as its
/// JSON: both ends serialize the same validated struct, so the bytes agree.
/// A field added to `TestSpec` changes those bytes for every spec (even as
/// `null`): it needs a new `PROTOCOL_VERSION`, or old and new peers would
/// see each other's proofs as wrong tokens.
fn label_and_context(purpose: Purpose) -> (&'static str, Vec<Vec<u8>>) {
    match purpose {
        Purpose::Open { test, duration_s } => {
            let spec = serde_json::to_vec(test).unwrap_or_default();
            (OPEN_LABEL, vec![spec, duration_s.to_be_bytes().to_vec()])
        }
        Purpose::Attach { session, stream } => (
            ATTACH_LABEL,
            vec![session.as_bytes().to_vec(), stream.to_be_bytes().to_vec()],
        ),
        Purpose::Describe => (DESCRIBE_LABEL, Vec::new()),
    }
}

/// The client's proof for `nonce` (hex) and `purpose`, as hex.
pub fn proof(token: &str, nonce: &str, purpose: Purpose) -> String {
    let (label, context) = label_and_context(purpose);
    let parts: Vec<&[u8]> = context.iter().map(Vec::as_slice).collect();
    hex(&proof::sign(
        token.as_bytes(),
        label,
        nonce.as_bytes(),
        &parts,
    ))
}

/// Whether `proof` (hex) was made with `token` for `nonce` and `purpose`.
/// The comparison takes the same time whatever the proof's content.
pub fn verify(token: &str, nonce: &str, purpose: Purpose, proof: &str) -> bool {
    let Some(bytes) = unhex(proof) else {
        return false;
    };
    let (label, context) = label_and_context(purpose);
    let parts: Vec<&[u8]> = context.iter().map(Vec::as_slice).collect();
    proof::verify(token.as_bytes(), label, nonce.as_bytes(), &parts, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn sink(streams: u32) -> TestSpec {
        TestSpec::Sink {
            streams,
            read_size: 65536,
            cpu: None,
        }
    }

    fn open(test: &TestSpec) -> Purpose<'_> {
        Purpose::Open {
            test,
            duration_s: 5,
        }
    }

    #[test]
    fn the_right_token_is_accepted() {
        let spec = sink(1);
        let p = proof("s3cret", NONCE, open(&spec));
        assert_eq!(p.len(), 64);
        assert!(verify("s3cret", NONCE, open(&spec), &p));
    }

    #[test]
    fn a_wrong_token_nonce_or_purpose_is_rejected() {
        let spec = sink(1);
        let p = proof("s3cret", NONCE, open(&spec));
        assert!(!verify("s3cret!", NONCE, open(&spec), &p));
        assert!(!verify("", NONCE, open(&spec), &p));
        let other_nonce = NONCE.replace('0', "1");
        assert!(!verify("s3cret", &other_nonce, open(&spec), &p));
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
    fn a_proof_for_one_test_is_refused_for_another() {
        let asked = sink(1);
        let p = proof("s3cret", NONCE, open(&asked));
        assert!(!verify("s3cret", NONCE, open(&sink(2)), &p));
        let longer = Purpose::Open {
            test: &asked,
            duration_s: 6,
        };
        assert!(!verify("s3cret", NONCE, longer, &p));
    }

    #[test]
    fn the_open_proof_is_pinned_to_protocol_version_2() {
        // If this changes (a TestSpec field, the label, the encoding), old
        // and new peers disagree on every proof: bump PROTOCOL_VERSION and
        // pin the new value. (Checked against Python's hmac over the same
        // length-prefixed parts: label, nonce text, spec JSON, duration.)
        assert_eq!(crate::protocol::PROTOCOL_VERSION, 2);
        assert_eq!(
            proof("s3cret", NONCE, open(&sink(1))),
            "101b91b9656dc829c498f59b5d33977a1f84dbeb0bd0ddbc759bf8122b0d66ec"
        );
    }

    #[test]
    fn garbage_proofs_are_rejected() {
        let spec = sink(1);
        for bad in ["", "zz", "00", &"0".repeat(64), &"0".repeat(63)] {
            assert!(!verify("s3cret", NONCE, open(&spec), bad));
        }
    }
}
