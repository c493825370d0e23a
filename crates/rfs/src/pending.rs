//! TCP connections that have not opened a ready session yet, and who may
//! make room for whom.
//!
//! They live in a pool of their own, apart from the sessions' slots, so
//! connections that never say hello cannot take the places of clients.
//! The pool is bounded in all and per source address (IPv4 address, IPv6
//! /64). A new connection always gets in: when its source has its most,
//! that source's oldest pending connection is closed; when the pool is
//! full, the oldest of all is. A client sends its hello as soon as it has
//! connected, so it is pending for a round trip and is never the oldest
//! unless a whole pool of connections arrived within that round trip;
//! trickling and silent connections are the old ones. An evicted
//! connection is shut down at once (its thread's read returns), so its
//! thread and slot go within a moment, not at the next poll.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The address a per-source limit counts: IPv4 addresses one by one, IPv6
/// by /64 (one host usually holds a whole /64).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
        },
    }
}

struct Entry {
    since: Instant,
    source: IpAddr,
    evicted: Arc<AtomicBool>,
    /// A second descriptor of the connection, to shut it down on eviction.
    stream: Option<TcpStream>,
}

/// The pool of pending connections.
pub(crate) struct Pending {
    max: usize,
    max_per_source: usize,
    entries: Mutex<HashMap<u64, Entry>>,
}

impl Pending {
    pub(crate) fn new(max: usize, max_per_source: usize) -> Pending {
        Pending {
            max: max.max(1),
            max_per_source: max_per_source.max(1),
            entries: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admit connection `conn` from `ip`, evicting as the limits say; the
    /// flag tells its thread it was evicted. Returns how many were evicted
    /// (0 or 1).
    pub(crate) fn admit(
        &self,
        conn: u64,
        ip: IpAddr,
        stream: &TcpStream,
    ) -> (Arc<AtomicBool>, usize) {
        let source = source_of(ip);
        let mut entries = self.lock();
        let from_source = entries.values().filter(|e| e.source == source).count();
        let victim = if from_source >= self.max_per_source {
            oldest(&entries, |e| e.source == source)
        } else if entries.len() >= self.max {
            oldest(&entries, |_| true)
        } else {
            None
        };
        let mut evicted = 0;
        if let Some(old) = victim.and_then(|v| entries.remove(&v)) {
            close(old);
            evicted = 1;
        }
        let flag = Arc::new(AtomicBool::new(false));
        entries.insert(
            conn,
            Entry {
                since: Instant::now(),
                source,
                evicted: Arc::clone(&flag),
                stream: stream.try_clone().ok(),
            },
        );
        (flag, evicted)
    }

    /// Close the oldest pending connection to make room; false if none.
    pub(crate) fn evict_oldest(&self) -> bool {
        let mut entries = self.lock();
        match oldest(&entries, |_| true).and_then(|v| entries.remove(&v)) {
            Some(old) => {
                close(old);
                true
            }
            None => false,
        }
    }

    /// `conn` has a ready session, or has ended.
    pub(crate) fn remove(&self, conn: u64) {
        self.lock().remove(&conn);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

fn oldest(entries: &HashMap<u64, Entry>, which: impl Fn(&Entry) -> bool) -> Option<u64> {
    entries
        .iter()
        .filter(|(_, e)| which(e))
        .min_by_key(|(_, e)| e.since)
        .map(|(conn, _)| *conn)
}

fn close(entry: Entry) {
    entry.evicted.store(true, Ordering::Relaxed);
    if let Some(s) = entry.stream {
        let _ = s.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> TcpStream {
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        listener.accept().unwrap().0
    }

    #[test]
    fn a_full_source_loses_its_oldest_and_a_full_pool_its_oldest_of_all() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let pool = Pending::new(4, 2);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "198.18.0.2".parse().unwrap();
        let s = pair(&listener);
        let (a1, _) = pool.admit(1, a, &s);
        let (a2, _) = pool.admit(2, a, &s);
        // A third from a: a's oldest goes.
        let (_, n) = pool.admit(3, a, &s);
        assert_eq!(n, 1);
        assert!(a1.load(Ordering::Relaxed) && !a2.load(Ordering::Relaxed));
        let (b1, n) = pool.admit(4, b, &s);
        assert_eq!(n, 0);
        let (_, n) = pool.admit(5, b, &s);
        assert_eq!((n, pool.len()), (0, 4));
        // The pool is full: the oldest of all (a's second) goes, not b's.
        let other: IpAddr = "198.18.0.3".parse().unwrap();
        let (_, n) = pool.admit(6, other, &s);
        assert_eq!((n, pool.len()), (1, 4));
        assert!(a2.load(Ordering::Relaxed) && !b1.load(Ordering::Relaxed));
        pool.remove(6);
        assert_eq!(pool.len(), 3);
    }

    #[test]
    fn an_evicted_connection_is_shut_down_at_once() {
        use std::io::Read;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, peer) = listener.accept().unwrap();
        let pool = Pending::new(1, 1);
        pool.admit(1, peer.ip(), &server_side);
        assert!(pool.evict_oldest());
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // The client sees the close (0 bytes) rather than waiting.
        assert_eq!(client.read(&mut [0u8; 8]).unwrap(), 0);
        assert!(!pool.evict_oldest());
    }

    #[test]
    fn ipv6_sources_count_by_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of(a), source_of(b));
        assert_ne!(source_of(a), source_of(c));
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
        assert_eq!(source_of(mapped), "198.18.0.1".parse::<IpAddr>().unwrap());
    }
}
