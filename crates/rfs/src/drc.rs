//! The duplicate-request cache: a retransmitted non-idempotent request is
//! answered with the reply the server already sent, not executed again.
//!
//! Why it is needed: over UDP the client retransmits a request whose reply
//! did not come back in time. The request may have been executed and only
//! the reply lost (or merely late). Executing a `Write` twice can undo a
//! later write to the same bytes; a second `Create` with `Exclusive` says
//! EXIST to the client whose create succeeded; a second `Remove` says
//! NOENT. So for those operations (see [`Op::is_cached`]) the server keys
//! the request by (session, request id), remembers it while it runs
//! (`InProgress`: a duplicate arriving then is dropped, the reply is on its
//! way) and keeps the encoded reply afterwards (`Done`: a duplicate gets
//! the same bytes again).
//!
//! The traps:
//!
//! - A request id reused for a *different* request is not a
//!   retransmission. Each entry keeps a fingerprint (xxh3-64) of the
//!   request's bytes; a mismatch is refused rather than answered with the
//!   reply of another request.
//! - The cache is bounded (per client, in bytes), so old replies are
//!   evicted. A retransmission of an evicted request would be executed
//!   again, silently. To make that impossible the cache remembers the
//!   highest evicted id (the *floor*) and refuses, rather than executes, a
//!   cached operation at or below it that it no longer holds. Clients keep
//!   every id in flight within half the cache's span of the newest one (the
//!   span is announced in `Welcome`), so a live retransmission is never
//!   that old; the floor only catches replays from misbehaving peers.
//! - Entries in progress are never evicted (they are bounded by the number
//!   of server threads anyway).

use crate::protocol::Op;
use std::collections::{HashMap, VecDeque};

/// Bookkeeping bytes charged per entry besides its reply.
pub const ENTRY_OVERHEAD: usize = 64;
/// Largest reply the cache is sized for: an error reply with the longest
/// detail (header, status, length, detail); success replies of cached
/// operations are smaller (a create reply is 70 bytes).
pub const MAX_CACHED_REPLY: usize = crate::protocol::HEADER_LEN + 3 + crate::protocol::MAX_DETAIL;
/// What one entry may cost at most.
pub const ENTRY_COST: usize = MAX_CACHED_REPLY + ENTRY_OVERHEAD;

/// The fingerprint of a request: its operation and body.
pub fn fingerprint(op: Op, body: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(body, u64::from(op.code()))
}

enum Slot {
    InProgress { fingerprint: u64 },
    Done { fingerprint: u64, reply: Vec<u8> },
}

/// What to do with a request that must not run twice.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Not seen before: execute it, then call [`Drc::complete`].
    New,
    /// Seen and answered: send these bytes again.
    Replay(Vec<u8>),
    /// Seen and still running: drop the duplicate.
    InProgress,
    /// The id was used for a different request.
    Reused,
    /// Older than what the cache still covers.
    TooOld { floor: u64 },
    /// Every entry is in progress and the budget is spent.
    Full,
}

/// One client's cache.
pub struct Drc {
    entries: HashMap<u64, Slot>,
    /// Ids in insertion order, for eviction.
    order: VecDeque<u64>,
    /// Highest evicted id; 0 while nothing was evicted.
    floor: u64,
    bytes: usize,
    budget: usize,
}

impl Drc {
    /// A cache that holds at most `budget` bytes of entries.
    pub fn new(budget: usize) -> Drc {
        Drc {
            entries: HashMap::new(),
            order: VecDeque::new(),
            floor: 0,
            bytes: 0,
            budget,
        }
    }

    /// How many entries a cache of `budget` bytes holds at least.
    pub fn span(budget: usize) -> u32 {
        u32::try_from(budget / ENTRY_COST).unwrap_or(u32::MAX)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Look up request `xid` with fingerprint `fp`; a new one is recorded
    /// as in progress.
    pub fn check(&mut self, xid: u64, fp: u64) -> Check {
        match self.entries.get(&xid) {
            Some(Slot::InProgress { fingerprint }) if *fingerprint == fp => {
                return Check::InProgress
            }
            Some(Slot::Done { fingerprint, reply }) if *fingerprint == fp => {
                return Check::Replay(reply.clone())
            }
            Some(_) => return Check::Reused,
            None => {}
        }
        if self.floor != 0 && xid <= self.floor {
            return Check::TooOld { floor: self.floor };
        }
        if !self.make_room(ENTRY_OVERHEAD) {
            return Check::Full;
        }
        self.entries
            .insert(xid, Slot::InProgress { fingerprint: fp });
        self.order.push_back(xid);
        self.bytes += ENTRY_OVERHEAD;
        Check::New
    }

    /// Record the reply of request `xid` (which [`check`](Self::check)
    /// called new).
    pub fn complete(&mut self, xid: u64, reply: &[u8]) {
        let Some(slot) = self.entries.get_mut(&xid) else {
            return;
        };
        let Slot::InProgress { fingerprint } = *slot else {
            return;
        };
        *slot = Slot::Done {
            fingerprint,
            reply: reply.to_vec(),
        };
        self.bytes += reply.len();
        self.make_room(0);
    }

    /// Forget request `xid` without a reply (it could not be executed), so
    /// a retransmission runs it.
    pub fn abandon(&mut self, xid: u64) {
        if let Some(Slot::InProgress { .. }) = self.entries.get(&xid) {
            self.entries.remove(&xid);
            self.order.retain(|&x| x != xid);
            self.bytes = self.bytes.saturating_sub(ENTRY_OVERHEAD);
        }
    }

    /// Evict finished entries, oldest first, until `extra` more bytes fit.
    /// False if they cannot (everything left is in progress).
    fn make_room(&mut self, extra: usize) -> bool {
        let mut rotations = self.order.len();
        while self.bytes + extra > self.budget {
            let Some(xid) = self.order.pop_front() else {
                return false;
            };
            match self.entries.get(&xid) {
                Some(Slot::InProgress { .. }) => {
                    self.order.push_back(xid);
                    if rotations == 0 {
                        return false;
                    }
                    rotations -= 1;
                }
                Some(Slot::Done { reply, .. }) => {
                    self.bytes = self.bytes.saturating_sub(ENTRY_OVERHEAD + reply.len());
                    self.entries.remove(&xid);
                    self.floor = self.floor.max(xid);
                }
                None => {}
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_is_answered_from_the_cache() {
        let mut c = Drc::new(1 << 20);
        assert_eq!(c.check(5, 1), Check::New);
        assert_eq!(c.check(5, 1), Check::InProgress);
        c.complete(5, b"reply");
        assert_eq!(c.check(5, 1), Check::Replay(b"reply".to_vec()));
        assert_eq!(c.check(5, 2), Check::Reused);
    }

    #[test]
    fn eviction_raises_the_floor_and_old_ids_are_refused() {
        let mut c = Drc::new(10 * (ENTRY_OVERHEAD + 10));
        for xid in 1..=100u64 {
            assert_eq!(c.check(xid, xid), Check::New);
            c.complete(xid, &[0u8; 10]);
            assert!(c.bytes() <= 10 * (ENTRY_OVERHEAD + 10));
        }
        assert!(c.len() <= 10);
        assert!(c.floor() >= 90);
        // Recent ones are still answered; forgotten ones are refused.
        assert_eq!(c.check(100, 100), Check::Replay(vec![0u8; 10]));
        assert!(matches!(c.check(3, 3), Check::TooOld { .. }));
        assert_eq!(c.check(101, 101), Check::New);
    }

    #[test]
    fn entries_in_progress_are_never_evicted() {
        let mut c = Drc::new(3 * ENTRY_OVERHEAD);
        assert_eq!(c.check(1, 1), Check::New);
        assert_eq!(c.check(2, 2), Check::New);
        assert_eq!(c.check(3, 3), Check::New);
        assert_eq!(c.check(4, 4), Check::Full);
        c.complete(1, b"");
        assert_eq!(c.check(4, 4), Check::New);
        assert_eq!(c.check(2, 2), Check::InProgress);
        assert!(matches!(c.check(1, 1), Check::TooOld { floor: 1 }));
    }

    #[test]
    fn abandoned_requests_run_again() {
        let mut c = Drc::new(1 << 16);
        assert_eq!(c.check(9, 1), Check::New);
        c.abandon(9);
        assert_eq!(c.check(9, 1), Check::New);
        assert_eq!(c.bytes(), ENTRY_OVERHEAD);
    }
}
