//! Back-off after failed proofs, per source, in a bounded table: the one
//! record both servers (`osprobe serve`'s gate and `rfs serve`) keep of
//! who guessed a token wrong.
//!
//! A wrong proof ends its session, but a guesser can open the next one at
//! once: thousands of guesses a second. So every failure from a source
//! lengthens the wait that source has before its next proof counts, twice
//! as long after every further failure ([`Policy::first`] up to
//! [`Policy::max`]), after [`Policy::free`] failures that cost nothing (a
//! mistyped token retried at once must work). What "wait" means is the
//! server's: the net server delays the next proof's check, the file
//! service refuses new sessions until the wait is over. A right proof
//! clears the source's record; a quiet [`Policy::forget_after`] forgets it.
//!
//! A source is an IPv4 address or an IPv6 /64 (one host usually has a
//! whole /64 to pick addresses from), never a port (ports are free).
//!
//! The table holds at most [`Policy::capacity`] sources: when a new one
//! does not fit, forgotten records go first, then the one whose wait ends
//! first. An attacker with many addresses can make the server forget some
//! records (those addresses may guess again sooner) but never grow its
//! memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where a peer comes from, as admission and back-off count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    /// The source of `ip`: the address itself (IPv4, or the IPv4 inside a
    /// mapped IPv6 address), or its /64 (IPv6).
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let mut segments = v6.segments();
                    segments[4..].fill(0);
                    Source(IpAddr::V6(segments.into()))
                }
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// How waits grow and how much is remembered.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Failures in a row that cost no wait.
    pub free: u32,
    /// The wait after the first failure that is not free; doubles after
    /// each further one.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
    /// A source's failures are forgotten after this long without one.
    pub forget_after: Duration,
    /// Sources remembered at once.
    pub capacity: usize,
}

impl Policy {
    /// The wait after `failures` failures in a row.
    pub fn wait_after(&self, failures: u32) -> Duration {
        match failures.checked_sub(self.free + 1) {
            None => Duration::ZERO,
            Some(doublings) => self
                .first
                .saturating_mul(1u32 << doublings.min(20))
                .min(self.max),
        }
    }
}

struct Record {
    failures: u32,
    last: Instant,
    until: Instant,
}

/// Which sources failed to prove the token, and how long each waits.
pub struct Backoff {
    policy: Policy,
    table: Mutex<HashMap<Source, Record>>,
}

impl Backoff {
    pub fn new(policy: Policy) -> Backoff {
        Backoff {
            policy: Policy {
                capacity: policy.capacity.max(1),
                ..policy
            },
            table: Mutex::new(HashMap::new()),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Source, Record>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forgotten(&self, r: &Record, now: Instant) -> bool {
        now.duration_since(r.last) > self.policy.forget_after
    }

    /// How long `ip`'s source must still wait, if at all (counted from its
    /// last failure).
    pub fn remaining(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        self.lock()
            .get(&Source::of(ip))
            .filter(|r| !self.forgotten(r, now))
            .and_then(|r| r.until.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// The wait `ip`'s source has now, in full (zero if none or forgotten).
    pub fn current(&self, ip: IpAddr) -> Duration {
        let source = Source::of(ip);
        let now = Instant::now();
        let mut table = self.lock();
        match table.get(&source) {
            Some(r) if self.forgotten(r, now) => {
                table.remove(&source);
                Duration::ZERO
            }
            Some(r) => self.policy.wait_after(r.failures),
            None => Duration::ZERO,
        }
    }

    /// A failed proof came from `ip`; returns the wait its source now has.
    pub fn failed(&self, ip: IpAddr) -> Duration {
        let source = Source::of(ip);
        let now = Instant::now();
        let mut table = self.lock();
        if !table.contains_key(&source) && table.len() >= self.policy.capacity {
            self.make_room(&mut table, now);
        }
        let r = table.entry(source).or_insert(Record {
            failures: 0,
            last: now,
            until: now,
        });
        if now.duration_since(r.last) > self.policy.forget_after {
            r.failures = 0;
        }
        r.failures = r.failures.saturating_add(1);
        r.last = now;
        let wait = self.policy.wait_after(r.failures);
        r.until = now + wait;
        wait
    }

    fn make_room(&self, table: &mut HashMap<Source, Record>, now: Instant) {
        table.retain(|_, r| !self.forgotten(r, now));
        if table.len() >= self.policy.capacity {
            let first_free = table.iter().min_by_key(|(_, r)| r.until).map(|(k, _)| *k);
            if let Some(victim) = first_free {
                table.remove(&victim);
            }
        }
    }

    /// A right proof came from `ip`: its source starts afresh.
    pub fn succeeded(&self, ip: IpAddr) {
        self.lock().remove(&Source::of(ip));
    }

    /// Sources remembered.
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

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn policy(free: u32) -> Policy {
        Policy {
            free,
            first: Duration::from_millis(100),
            max: Duration::from_millis(500),
            forget_after: Duration::from_secs(60),
            capacity: 16,
        }
    }

    #[test]
    fn waits_double_after_the_free_failures_up_to_the_cap() {
        let b = Backoff::new(policy(1));
        let a = ip("198.18.0.1");
        assert_eq!(b.failed(a), Duration::ZERO, "one mistake is free");
        assert_eq!(b.remaining(a), None);
        assert_eq!(b.failed(a), Duration::from_millis(100));
        assert_eq!(b.failed(a), Duration::from_millis(200));
        assert_eq!(b.current(a), Duration::from_millis(200));
        assert!(b.remaining(a).is_some());
        assert_eq!(b.remaining(ip("198.18.0.2")), None, "others unaffected");
        for _ in 0..40 {
            b.failed(a);
        }
        assert_eq!(b.failed(a), Duration::from_millis(500));
        b.succeeded(a);
        assert_eq!(b.current(a), Duration::ZERO);
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_while() {
        let b = Backoff::new(Policy {
            forget_after: Duration::from_millis(100),
            ..policy(0)
        });
        let a = ip("198.18.0.1");
        assert_eq!(b.failed(a), Duration::from_millis(100));
        assert_eq!(b.failed(a), Duration::from_millis(200));
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(b.current(a), Duration::ZERO);
        assert_eq!(b.failed(a), Duration::from_millis(100), "counted afresh");
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_the_newest() {
        let b = Backoff::new(policy(0));
        for i in 0..1000u32 {
            b.failed(IpAddr::V4((0xc612_0000 + i).into()));
        }
        assert!(b.len() <= 16, "{}", b.len());
        assert!(b
            .remaining(IpAddr::V4((0xc612_0000 + 999).into()))
            .is_some());
    }

    #[test]
    fn ipv6_sources_are_counted_per_64() {
        assert_eq!(
            Source::of(ip("2001:db8:1:2::1")),
            Source::of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            Source::of(ip("2001:db8:1:2::1")),
            Source::of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            Source::of(ip("::ffff:10.0.0.1")),
            Source::of(ip("10.0.0.1"))
        );
        let b = Backoff::new(policy(0));
        b.failed(ip("2001:db8:1:2::1"));
        assert!(b.remaining(ip("2001:db8:1:2::99")).is_some());
    }
}
