//! Who gets a session: the slots of the clients that may make requests,
//! and, on a server with a token, a pool of its own for the sessions that
//! have not proved it yet.
//!
//! A session that has not proved the token costs its peer one hello, and
//! a legitimate client leaves the pool one round trip later. So the pool
//! never refuses: when a source (an IPv4 address or an IPv6 /64,
//! [`osprobe_core::backoff::Source`]) holds `max_unauthenticated_per_source`
//! such sessions, its oldest goes; when the pool holds
//! `max_unauthenticated`, the oldest of the source with the most goes.
//! A peer re-sending hellos as fast as it can evicts its own sessions
//! first, and a client's session lives as long as the flood needs to
//! send a source's worth of hellos, which is far longer than a round
//! trip. The `max_clients` slots belong to sessions that proved the
//! token: a session takes one when its proof is checked, and the proof
//! is answered BUSY when they are all taken.
//!
//! Without a token every session may make requests at once, so it takes
//! a slot at its hello; a session nothing came after (a hello from a
//! forged address) can be evicted for a new client after
//! [`UNCONFIRMED_GRACE`](super::UNCONFIRMED_GRACE).

use super::{err, OpResult, Peer, ServerEvent, Service, Session, UNCONFIRMED_GRACE};
use crate::protocol::ErrorCode;
use osprobe_core::backoff::Source;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type Sessions = HashMap<u64, Arc<Session>>;

fn proved(s: &Session) -> bool {
    s.authenticated.load(Ordering::Acquire)
}

impl Service {
    fn busy(&self) -> crate::protocol::RemoteError {
        err(
            ErrorCode::Busy,
            format!(
                "the server serves at most {} clients at once; try again later",
                self.config.max_clients
            ),
        )
    }

    /// Whether a new session from `peer` may open: one per TCP connection,
    /// none from an address backed off after wrong tokens, and room among
    /// the clients (expired sessions dropped, unconfirmed or
    /// unauthenticated ones evicted).
    pub(super) fn admit(&self, peer: Peer, sessions: &mut Sessions) -> OpResult<()> {
        if matches!(peer, Peer::Tcp { .. }) && sessions.values().any(|s| s.peer == peer) {
            return Err(err(
                ErrorCode::Invalid,
                "this connection has a session already; one session per TCP connection",
            ));
        }
        if self.config.token.is_some() {
            if let Some(wait) = self.backoff.remaining(peer.addr().ip()) {
                return Err(err(ErrorCode::Auth, crate::backoff::refusal(wait)));
            }
        }
        self.expire_locked(sessions);
        if self.config.token.is_some() {
            if sessions.values().filter(|s| proved(s)).count() >= self.config.max_clients {
                return Err(self.busy());
            }
            self.make_room_unauthenticated(Source::of(peer.addr().ip()), sessions);
            return Ok(());
        }
        if sessions.len() >= self.config.max_clients {
            self.evict_unconfirmed(sessions);
        }
        if sessions.len() >= self.config.max_clients {
            return Err(self.busy());
        }
        Ok(())
    }

    /// A right proof: the session takes one of the clients' slots, or
    /// ends with BUSY if they are all taken.
    pub(super) fn promote(&self, session: &Session) -> OpResult<()> {
        let mut sessions = super::lock(&self.sessions);
        if !sessions.contains_key(&session.id) {
            return Err(err(
                ErrorCode::BadSession,
                format!(
                    "session {:016x} was evicted before its proof came; say hello again",
                    session.id
                ),
            ));
        }
        if sessions.values().filter(|s| proved(s)).count() >= self.config.max_clients {
            sessions.remove(&session.id);
            drop(sessions);
            self.emit(ServerEvent::SessionEnded {
                peer: session.peer.addr(),
                session: session.id,
                reason: "authenticated, but every client slot is taken",
            });
            return Err(self.busy());
        }
        session.authenticated.store(true, Ordering::Release);
        session.confirmed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Make room in the pool of sessions without a proof for one more from
    /// `source`: evict the oldest of `source` if it has its share, else
    /// the oldest of the busiest source if the pool is full.
    fn make_room_unauthenticated(&self, source: Source, sessions: &mut Sessions) {
        let mut counts: HashMap<Source, usize> = HashMap::new();
        for s in sessions.values().filter(|s| !proved(s)) {
            *counts.entry(Source::of(s.peer.addr().ip())).or_default() += 1;
        }
        let total: usize = counts.values().sum();
        let per_source = self.config.max_unauthenticated_per_source.max(1);
        let victims = if counts.get(&source).copied().unwrap_or(0) >= per_source {
            Some(source)
        } else if total >= self.config.max_unauthenticated.max(1) {
            counts.iter().max_by_key(|(_, n)| **n).map(|(s, _)| *s)
        } else {
            None
        };
        let Some(victims) = victims else { return };
        let oldest = sessions
            .values()
            .filter(|s| !proved(s) && Source::of(s.peer.addr().ip()) == victims)
            .min_by_key(|s| s.created)
            .map(|s| s.id);
        if let Some(id) = oldest {
            self.evict(sessions, id, "unauthenticated, evicted for a new client");
        }
    }

    /// Make room by dropping the oldest session that never sent a second
    /// message and is older than [`UNCONFIRMED_GRACE`]: hellos from forged
    /// addresses cannot lock real clients out for longer than that.
    fn evict_unconfirmed(&self, sessions: &mut Sessions) {
        let victim = sessions
            .values()
            .filter(|s| {
                !s.confirmed.load(Ordering::Relaxed) && s.created.elapsed() > UNCONFIRMED_GRACE
            })
            .min_by_key(|s| s.created)
            .map(|s| s.id);
        if let Some(id) = victim {
            self.evict(sessions, id, "unconfirmed, evicted for a new client");
        }
    }

    fn evict(&self, sessions: &mut Sessions, id: u64, reason: &'static str) {
        if let Some(s) = sessions.remove(&id) {
            self.emit(ServerEvent::SessionEnded {
                peer: s.peer.addr(),
                session: id,
                reason,
            });
        }
    }
}
