//! Source-address validation for UDP: a stateless cookie round trip before
//! any session state exists (as QUIC's Retry and DTLS's
//! HelloVerifyRequest do).
//!
//! Over UDP anyone can put any source address on a datagram. Without
//! validation, a hello from a forged address makes the server create a
//! session, write a log line and send a reply to the forged address: the
//! server becomes a reflector aimed at a victim. So the first hello from
//! an address (with an all-zero cookie) gets only `Retry` carrying a cookie,
//! an HMAC of the source address and port and the current time bucket under
//! a secret the server drew at start. The server keeps nothing. Only a hello
//! that comes back with a valid cookie, which proves the sender receives
//! datagrams at that address, opens a session.
//!
//! Amplification: every hello is padded to [`HELLO_LEN`] bytes, and the
//! `Retry` (58 bytes) and `Welcome` (83 bytes) are smaller. A message from
//! an address that has no session is never answered with more bytes than
//! it had (the service cuts or drops such replies).
//!
//! A cookie is good for the bucket it was made in and the next one, so
//! between [`PERIOD`] and twice that; a client that takes longer simply
//! gets a new `Retry`. TCP needs none of this: its handshake already
//! proves the address.
//!
//! [`HELLO_LEN`]: crate::protocol::HELLO_LEN

use crate::protocol::{COOKIE_LEN, HEADER_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

type HmacSha256 = Hmac<Sha256>;

const CONTEXT: &[u8] = b"osprobe-rfs-cookie-v1\0";
/// Length of one time bucket.
pub const PERIOD: Duration = Duration::from_secs(30);

/// Issues and checks cookies; holds only the secret and a clock origin.
pub struct CookieJar {
    secret: [u8; 32],
    origin: Instant,
}

impl CookieJar {
    /// A jar with a fresh random secret.
    pub fn new() -> io::Result<CookieJar> {
        Ok(CookieJar {
            secret: crate::auth::random_bytes::<32>()?,
            origin: Instant::now(),
        })
    }

    fn bucket(&self) -> u64 {
        self.origin.elapsed().as_secs() / PERIOD.as_secs()
    }

    fn mac(&self, addr: SocketAddr, bucket: u64) -> HmacSha256 {
        // HMAC takes keys of any length: new_from_slice cannot fail.
        let mut mac = HmacSha256::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(CONTEXT);
        let ip = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        mac.update(&ip.octets());
        mac.update(&addr.port().to_be_bytes());
        mac.update(&bucket.to_be_bytes());
        mac
    }

    fn issue_in(&self, addr: SocketAddr, bucket: u64) -> [u8; COOKIE_LEN] {
        self.mac(addr, bucket).finalize().into_bytes().into()
    }

    /// The cookie for `addr` now.
    pub fn issue(&self, addr: SocketAddr) -> [u8; COOKIE_LEN] {
        self.issue_in(addr, self.bucket())
    }

    /// Whether `cookie` was issued to `addr` in this bucket or the last
    /// one. Constant time in the cookie's content.
    pub fn check(&self, addr: SocketAddr, cookie: &[u8; COOKIE_LEN]) -> bool {
        let now = self.bucket();
        [Some(now), now.checked_sub(1)]
            .into_iter()
            .flatten()
            .any(|b| self.mac(addr, b).verify_slice(cookie).is_ok())
    }
}

/// Make the reply at `out[start..]` no larger than `max` bytes (the size
/// of the request it answers), for a source address that is not validated.
/// An error reply's detail is cut (at a character boundary, then at the
/// last separator, so what is left reads as words); false if the reply
/// cannot fit (the caller sends nothing).
pub fn fit_reply(out: &mut Vec<u8>, start: usize, max: usize) -> bool {
    let len = out.len() - start;
    if len <= max {
        return true;
    }
    // An error reply: header, status (non-zero), detail length u16, detail.
    let detail_at = start + HEADER_LEN + 3;
    let is_error = len >= HEADER_LEN + 3 && out[start + HEADER_LEN] != 0;
    if !is_error || max < HEADER_LEN + 3 {
        return false;
    }
    let room = max - HEADER_LEN - 3;
    let detail = String::from_utf8_lossy(&out[detail_at..]).into_owned();
    let mut end = room.min(detail.len());
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    let cut = detail[..end].trim_end_matches([';', ':', ',', ' ']);
    let cut = cut.to_string();
    out.truncate(detail_at - 2);
    out.extend_from_slice(&(cut.len() as u16).to_be_bytes());
    out.extend_from_slice(cut.as_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_bind_address_port_and_time() {
        let jar = CookieJar::new().unwrap();
        let a: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let c = jar.issue(a);
        assert!(jar.check(a, &c));
        assert!(!jar.check("127.0.0.1:4001".parse().unwrap(), &c));
        assert!(!jar.check("127.0.0.2:4000".parse().unwrap(), &c));
        assert!(!jar.check(a, &[0; COOKIE_LEN]));
        // Another server (secret) does not accept it.
        assert!(!CookieJar::new().unwrap().check(a, &c));
        // A cookie from a bucket long gone is refused.
        let old = jar.issue_in(a, jar.bucket() + 5);
        assert!(!jar.check(a, &old));
    }

    #[test]
    fn replies_are_cut_to_the_request_size_or_dropped() {
        use crate::protocol::{decode_reply, encode_error_reply, ErrorCode, RemoteError};
        let e = RemoteError::new(ErrorCode::BadSession, "v2 required: a long explanation");
        let mut out = vec![9u8; 5];
        encode_error_reply(1, 2, 8, &e, &mut out);
        let full = out.len() - 5;
        assert!(fit_reply(&mut out, 5, full));
        assert_eq!(out.len() - 5, full, "a reply that fits is untouched");
        assert!(fit_reply(&mut out, 5, 40));
        assert!(out.len() - 5 <= 40);
        let (_, _, r) = decode_reply(&out[5..]).unwrap();
        assert_eq!(r.unwrap_err().detail, "v2 required");
        assert!(!fit_reply(&mut out, 5, 26), "not even the bare error fits");
    }
}
