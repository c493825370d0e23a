//! The file service's back-off after wrong tokens: its waits and the
//! refusal text a client reads them from. The table itself (per source,
//! bounded) is [`osprobe_core::backoff`], shared with `osprobe serve`.
//!
//! A wrong proof ends its session, but a guesser can open the next session
//! at once: thousands of guesses a second. After the second wrong proof in a
//! row from an address (the first is free: a mistyped token retried at once
//! must work), that address may not open a session for a while, twice as
//! long after every further failure ([`FIRST`] up to [`MAX`]). Keyed by IP
//! address (IPv6: its /64), not port (ports are free to change). A right
//! proof clears the address's record.
//!
//! Everyone behind the address waits, the owner of the token too (the
//! server cannot tell them apart): the client waits out a short refusal
//! (up to a few seconds) and tries again, and its first right proof
//! clears the record, so a guesser sharing a legitimate client's address
//! is slowed to a few guesses a second without locking the client out.
//!
//! The table holds at most `capacity` addresses: when it is full, records
//! forgotten after [`FORGET_AFTER`] go first, then the one whose wait ends
//! first. So an attacker with many addresses can make the server forget
//! some records (those addresses may guess again sooner) but never grow
//! its memory.

use osprobe_core::backoff::{Backoff, Policy};
use std::time::Duration;

/// Wrong proofs in a row that cost no wait.
pub const FREE: u32 = 1;
/// Wait after the first wrong proof that is not free.
pub const FIRST: Duration = Duration::from_millis(250);
/// Longest wait.
pub const MAX: Duration = Duration::from_secs(30);
/// How a refused hello's detail begins; the wait in seconds follows.
pub const REFUSAL: &str = "wrong tokens came from this address: wait ";

/// The detail of a hello refused for `wait`.
pub fn refusal(wait: Duration) -> String {
    format!("{REFUSAL}{:.2} s before the next try", wait.as_secs_f64())
}

/// The wait a refusal names (a client waits it out and tries again).
pub fn parse_refusal(detail: &str) -> Option<Duration> {
    let rest = detail.strip_prefix(REFUSAL)?;
    let secs: f64 = rest.split(' ').next()?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

/// Addresses remembered by default.
pub const DEFAULT_CAPACITY: usize = 4096;
/// A source's failures are forgotten after this long without one.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The file service's back-off table ([`osprobe_core::backoff`] with this
/// module's waits).
pub fn table(capacity: usize) -> Backoff {
    Backoff::new(Policy {
        free: FREE,
        first: FIRST,
        max: MAX,
        forget_after: FORGET_AFTER,
        capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(i: u32) -> std::net::IpAddr {
        std::net::IpAddr::V4(std::net::Ipv4Addr::from(0xc612_0000 + i))
    }

    #[test]
    fn waits_double_up_to_the_cap_and_clear_on_success() {
        let b = table(16);
        assert_eq!(b.remaining(ip(1)), None);
        assert_eq!(b.failed(ip(1)), Duration::ZERO, "one mistake is free");
        assert_eq!(b.remaining(ip(1)), None);
        assert_eq!(b.failed(ip(1)), FIRST);
        assert_eq!(b.failed(ip(1)), FIRST * 2);
        assert!(b.remaining(ip(1)).is_some());
        assert_eq!(b.remaining(ip(2)), None, "other addresses are not affected");
        for _ in 0..40 {
            b.failed(ip(1));
        }
        assert_eq!(b.failed(ip(1)), MAX);
        b.succeeded(ip(1));
        assert_eq!(b.remaining(ip(1)), None);
    }

    #[test]
    fn refusals_name_their_wait() {
        let d = refusal(Duration::from_millis(250));
        assert_eq!(parse_refusal(&d), Some(Duration::from_millis(250)));
        assert_eq!(parse_refusal("wrong token: no"), None);
        assert_eq!(parse_refusal(&format!("{REFUSAL}NaN s")), None);
    }

    #[test]
    fn the_table_stays_bounded() {
        let b = table(100);
        for i in 0..10_000 {
            b.failed(ip(i));
            b.failed(ip(i));
        }
        assert!(b.len() <= 100, "{}", b.len());
        assert!(b.remaining(ip(9_999)).is_some(), "the newest is remembered");
    }
}
