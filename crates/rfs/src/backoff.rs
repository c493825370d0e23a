//! Back-off after wrong tokens, per source address, in a bounded table.
//!
//! A wrong proof ends its session, but a guesser can open the next session
//! at once: thousands of guesses a second. After the second wrong proof in a
//! row from an address (the first is free: a mistyped token retried at once
//! must work), that address may not open a session for a while, twice as
//! long after every further failure ([`FIRST`] up to [`MAX`]). Keyed by IP
//! address, not port (ports are free to change). A right proof clears the
//! address's record.
//!
//! Everyone behind the address waits, the owner of the token too (the
//! server cannot tell them apart): the client waits out a short refusal
//! (up to a few seconds) and tries again, and its first right proof
//! clears the record, so a guesser sharing a legitimate client's address
//! is slowed to a few guesses a second without locking the client out.
//!
//! The table holds at most `capacity` addresses: when it is full, records
//! whose wait is over go first, then the oldest. So an attacker with many
//! addresses can make the server forget some records (those addresses may
//! guess again sooner) but never grow its memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

struct Record {
    failures: u32,
    until: Instant,
}

/// Which addresses must wait before their next session.
pub struct Backoff {
    table: Mutex<HashMap<IpAddr, Record>>,
    capacity: usize,
}

impl Backoff {
    pub fn new(capacity: usize) -> Backoff {
        Backoff {
            table: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Record>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `ip` must still wait, if at all.
    pub fn wait(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        self.lock()
            .get(&ip)
            .and_then(|r| r.until.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// A wrong proof came from `ip`; returns the wait it now has.
    pub fn failed(&self, ip: IpAddr) -> Duration {
        let now = Instant::now();
        let mut table = self.lock();
        if !table.contains_key(&ip) && table.len() >= self.capacity {
            // Forget the records whose wait is over; if none, the one
            // whose wait ends first.
            table.retain(|_, r| r.until > now);
            if table.len() >= self.capacity {
                if let Some(victim) = table.iter().min_by_key(|(_, r)| r.until).map(|(k, _)| *k) {
                    table.remove(&victim);
                }
            }
        }
        let r = table.entry(ip).or_insert(Record {
            failures: 0,
            until: now,
        });
        r.failures = r.failures.saturating_add(1);
        let wait = match r.failures.checked_sub(FREE + 1) {
            None => Duration::ZERO,
            Some(doublings) => FIRST.saturating_mul(1u32 << doublings.min(16)).min(MAX),
        };
        r.until = now + wait;
        wait
    }

    /// A right proof came from `ip`.
    pub fn succeeded(&self, ip: IpAddr) {
        self.lock().remove(&ip);
    }

    /// Addresses remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0xc612_0000 + i))
    }

    #[test]
    fn waits_double_up_to_the_cap_and_clear_on_success() {
        let b = Backoff::new(16);
        assert_eq!(b.wait(ip(1)), None);
        assert_eq!(b.failed(ip(1)), Duration::ZERO, "one mistake is free");
        assert_eq!(b.wait(ip(1)), None);
        assert_eq!(b.failed(ip(1)), FIRST);
        assert_eq!(b.failed(ip(1)), FIRST * 2);
        assert!(b.wait(ip(1)).is_some());
        assert_eq!(b.wait(ip(2)), None, "other addresses are not affected");
        for _ in 0..40 {
            b.failed(ip(1));
        }
        assert_eq!(b.failed(ip(1)), MAX);
        b.succeeded(ip(1));
        assert_eq!(b.wait(ip(1)), None);
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
        let b = Backoff::new(100);
        for i in 0..10_000 {
            b.failed(ip(i));
            b.failed(ip(i));
        }
        assert!(b.len() <= 100, "{}", b.len());
        assert!(b.wait(ip(9_999)).is_some(), "the newest is remembered");
    }
}
