//! Who gets a server's attention before proving anything: bounded pending
//! (unauthenticated) connections per source and in all, and back-off after
//! failed proofs.
//!
//! Pending connections are cheap to make and slow to finish for an
//! attacker (trickle a byte a second, or say nothing), quick to finish for
//! a real client (one round trip). So when a source, or the server, has as
//! many pending connections as it may, a new one does not wait or get
//! refused: the oldest pending connection of that source (or of the source
//! with the most) is evicted to make room. A client that completes its
//! handshake in a round trip is never the oldest, so hundreds of slow
//! connections, even from its own address, cannot lock it out.
//!
//! After a failed proof a source is backed off: every later proof from it
//! that opens a session (right or wrong, so the delay tells nothing) is
//! checked only after a delay that doubles with each failure (up to
//! [`Limits::backoff_max`]),
//! while the connection keeps its pending slot. With at most
//! [`Limits::per_source`] slots, a source can test at most that many guesses
//! per delay instead of thousands a second. The source is delayed, never
//! refused: a legitimate client behind the same address (NAT, loopback)
//! is slowed down, not locked out. Failures are forgotten after a quiet
//! [`Limits::forget_after`]; the table of sources is bounded. The record
//! of failures is [`osprobe_core::backoff`], shared with `rfs serve`.
//!
//! A source is an IPv4 address or an IPv6 /64 (one host usually has a
//! whole /64 to pick addresses from).

use osprobe_core::backoff::{Backoff, Policy};
use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The bounds of a [`Gate`].
#[derive(Debug, Clone)]
pub struct Limits {
    /// Pending connections one source may hold.
    pub per_source: usize,
    /// Pending connections in all.
    pub total: usize,
    /// Back-off after the first failed proof; doubles with each failure.
    pub backoff_base: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
    /// A source's failures are forgotten after this long without one.
    pub forget_after: Duration,
    /// Sources whose failures are remembered at once (the oldest are
    /// forgotten first when a new one does not fit).
    pub max_sources: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_source: 64,
            total: 256,
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            forget_after: Duration::from_secs(60),
            max_sources: 4096,
        }
    }
}

pub use osprobe_core::backoff::Source;

struct Pending {
    id: u64,
    source: Source,
    since: Instant,
    /// A clone of the connection, to wake its handler when evicted.
    socket: TcpStream,
    evicted: Arc<AtomicBool>,
    /// Its first message has arrived whole: it waits on us (a back-off),
    /// not we on it, and is evicted only when no slow one is left.
    ready: bool,
}

#[derive(Default)]
struct State {
    next_id: u64,
    pending: Vec<Pending>,
}

/// Pending connections and back-off, shared by a server's threads.
pub struct Gate {
    limits: Limits,
    state: Mutex<State>,
    /// Failed proofs per source ([`osprobe_core::backoff`]).
    failures: Backoff,
    /// Connections evicted since the last [`Gate::take_evicted`].
    evicted: AtomicUsize,
}

/// A pending connection's place at the gate; released when dropped or when
/// the connection authenticates.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    evicted: Arc<AtomicBool>,
}

impl Ticket {
    /// Whether the gate evicted this connection to make room.
    pub fn evicted(&self) -> bool {
        self.evicted.load(Ordering::SeqCst)
    }

    /// Its first message has arrived whole: from now on it is evicted only
    /// after every slow pending connection of its source. False if it was
    /// evicted before (its socket is shut for reading: whatever it asks
    /// for would end at the next read).
    #[must_use]
    pub fn ready(&self) -> bool {
        let mut state = self.gate.lock();
        match state.pending.iter_mut().find(|p| p.id == self.id) {
            Some(p) => {
                p.ready = true;
                true
            }
            None => false,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.lock().pending.retain(|p| p.id != self.id);
    }
}

impl Gate {
    pub fn new(limits: Limits) -> Arc<Gate> {
        let failures = Backoff::new(Policy {
            free: 0,
            first: limits.backoff_base,
            max: limits.backoff_max,
            forget_after: limits.forget_after,
            capacity: limits.max_sources,
        });
        Arc::new(Gate {
            limits,
            state: Mutex::new(State::default()),
            failures,
            evicted: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count `stream` from `ip` as pending, evicting the oldest pending
    /// connection of its source, or of the busiest source, if either is
    /// full. Fails only if the connection cannot be tracked (no descriptor
    /// for its clone).
    pub fn admit(self: &Arc<Self>, stream: &TcpStream, ip: IpAddr) -> std::io::Result<Ticket> {
        let socket = stream.try_clone()?;
        let source = Source::of(ip);
        let mut state = self.lock();
        let mine = state.pending.iter().filter(|p| p.source == source).count();
        if mine >= self.limits.per_source.max(1) {
            self.evict_oldest_of(&mut state, source);
        } else if state.pending.len() >= self.limits.total.max(1) {
            let busiest = busiest_source(&state.pending);
            if let Some(busiest) = busiest {
                self.evict_oldest_of(&mut state, busiest);
            }
        }
        state.next_id += 1;
        let id = state.next_id;
        let evicted = Arc::new(AtomicBool::new(false));
        state.pending.push(Pending {
            id,
            source,
            since: Instant::now(),
            socket,
            evicted: Arc::clone(&evicted),
            ready: false,
        });
        Ok(Ticket {
            gate: Arc::clone(self),
            id,
            evicted,
        })
    }

    fn evict_oldest_of(&self, state: &mut State, source: Source) {
        let oldest = state
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.source == source)
            .min_by_key(|(_, p)| (p.ready, p.since))
            .map(|(i, _)| i);
        if let Some(i) = oldest {
            let victim = state.pending.swap_remove(i);
            victim.evicted.store(true, Ordering::SeqCst);
            // Ends the handler's read at once; it answers busy and closes.
            let _ = victim.socket.shutdown(Shutdown::Read);
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Connections evicted since the last call (for a summary log line).
    pub fn take_evicted(&self) -> usize {
        self.evicted.swap(0, Ordering::Relaxed)
    }

    /// How long a proof from `ip` must wait before it is checked.
    pub fn backoff(&self, ip: IpAddr) -> Duration {
        self.failures.current(ip)
    }

    /// Record a failed proof from `ip`; returns the back-off it now has.
    pub fn failed(&self, ip: IpAddr) -> Duration {
        self.failures.failed(ip)
    }

    /// Pending connections now (for tests and logs).
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Sources whose failures are remembered now.
    pub fn sources_backed_off(&self) -> usize {
        self.failures.len()
    }
}

fn busiest_source(pending: &[Pending]) -> Option<Source> {
    let mut counts: HashMap<Source, usize> = HashMap::new();
    for p in pending {
        *counts.entry(p.source).or_default() += 1;
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_full_source_loses_its_oldest_pending_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate::new(Limits {
            per_source: 2,
            ..Limits::default()
        });
        let conns: Vec<_> = (0..3).map(|_| pair(&listener)).collect();
        let a = gate.admit(&conns[0].1, ip("10.0.0.1")).unwrap();
        let b = gate.admit(&conns[1].1, ip("10.0.0.1")).unwrap();
        let other = gate.admit(&conns[2].1, ip("10.0.0.2")).unwrap();
        assert!(!a.evicted());
        let extra = pair(&listener);
        let c = gate.admit(&extra.1, ip("10.0.0.1")).unwrap();
        assert!(a.evicted(), "the oldest of the full source goes");
        assert!(!b.evicted() && !c.evicted() && !other.evicted());
        assert_eq!(gate.pending(), 3);
        assert_eq!(gate.take_evicted(), 1);
        drop((b, c, other));
        assert_eq!(gate.pending(), 0);
        drop(a);
    }

    #[test]
    fn a_connection_that_said_its_piece_is_evicted_last() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate::new(Limits {
            per_source: 2,
            ..Limits::default()
        });
        let conns: Vec<_> = (0..4).map(|_| pair(&listener)).collect();
        let waiting = gate.admit(&conns[0].1, ip("10.0.0.1")).unwrap();
        assert!(waiting.ready());
        let slow = gate.admit(&conns[1].1, ip("10.0.0.1")).unwrap();
        let newer = gate.admit(&conns[2].1, ip("10.0.0.1")).unwrap();
        assert!(
            slow.evicted() && !waiting.evicted(),
            "the slow one goes first"
        );
        assert!(newer.ready());
        let _newest = gate.admit(&conns[3].1, ip("10.0.0.1")).unwrap();
        assert!(waiting.evicted(), "all ready: the oldest goes");
        assert!(!newer.evicted());
        assert!(
            !slow.ready(),
            "evicted before its first message was whole: not ready, told busy"
        );
    }

    #[test]
    fn a_full_gate_evicts_from_the_busiest_source() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate::new(Limits {
            per_source: 10,
            total: 3,
            ..Limits::default()
        });
        let conns: Vec<_> = (0..4).map(|_| pair(&listener)).collect();
        let quiet = gate.admit(&conns[0].1, ip("10.0.0.9")).unwrap();
        let flood1 = gate.admit(&conns[1].1, ip("10.0.0.1")).unwrap();
        let flood2 = gate.admit(&conns[2].1, ip("10.0.0.1")).unwrap();
        let newcomer = gate.admit(&conns[3].1, ip("10.0.0.5")).unwrap();
        assert!(
            !quiet.evicted(),
            "the older but quieter source keeps its slot"
        );
        assert!(flood1.evicted());
        assert!(!flood2.evicted() && !newcomer.evicted());
    }

    #[test]
    fn backoff_doubles_is_capped_and_is_forgotten() {
        let gate = Gate::new(Limits {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
            forget_after: Duration::from_millis(200),
            ..Limits::default()
        });
        let a = ip("10.0.0.1");
        assert_eq!(gate.backoff(a), Duration::ZERO);
        assert_eq!(gate.failed(a), Duration::from_millis(100));
        assert_eq!(gate.failed(a), Duration::from_millis(200));
        assert_eq!(gate.failed(a), Duration::from_millis(400));
        assert_eq!(gate.failed(a), Duration::from_millis(500));
        assert_eq!(gate.backoff(a), Duration::from_millis(500));
        assert_eq!(gate.backoff(ip("10.0.0.2")), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(gate.backoff(a), Duration::ZERO, "forgotten after quiet");
    }

    #[test]
    fn the_table_of_sources_is_bounded() {
        let gate = Gate::new(Limits {
            max_sources: 16,
            ..Limits::default()
        });
        for i in 0..1000u32 {
            gate.failed(IpAddr::V4(i.into()));
        }
        assert!(gate.sources_backed_off() <= 16);
    }
}
