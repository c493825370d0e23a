//! File handles and the server's small cache of open files.
//!
//! A handle is 16 opaque bytes: the server's *epoch* (random, chosen at
//! start-up) and an index into this table, which maps it to a [`RelPath`]
//! inside the export plus the file's identity (device, inode) when the
//! handle was made. Every use re-resolves the path beneath the export (see
//! [`crate::export`]) and checks the identity, so a handle can never name
//! anything outside the export, and a handle whose file was removed or
//! replaced is STALE rather than silently naming the new file. After a
//! restart the epoch differs and every old handle is STALE.
//!
//! The table is bounded (entries and path bytes); the least recently used
//! entries are evicted in batches, and an evicted handle is STALE (the
//! client looks the name up again). Lookups of the same path share one
//! entry.
//!
//! Reads and writes would otherwise open and close the file for each
//! request; [`FdCache`] keeps a few descriptors open for a short time
//! (a second), after which the path is resolved and checked again. Trap:
//! a cached descriptor follows the inode, so a file that a local process
//! renames out of the export stays reachable through it until the entry
//! expires; the short lifetime bounds that window.

use crate::export::RelPath;
use crate::protocol::{Handle, Kind};
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a handle names.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub index: u64,
    pub path: RelPath,
    pub kind: Kind,
    /// (device, inode) when the handle was made.
    pub identity: (u64, u64),
}

struct Entry {
    path: RelPath,
    kind: Kind,
    identity: (u64, u64),
    last_used: u64,
}

/// The handle table.
pub struct HandleTable {
    epoch: u64,
    next: u64,
    tick: u64,
    by_index: HashMap<u64, Entry>,
    by_path: HashMap<RelPath, u64>,
    path_bytes: usize,
    max_entries: usize,
    max_path_bytes: usize,
}

impl HandleTable {
    /// A table whose root (index 0) is the export, with identity `root`.
    pub fn new(epoch: u64, root: (u64, u64), max_entries: usize, max_path_bytes: usize) -> Self {
        let mut t = HandleTable {
            epoch,
            next: 1,
            tick: 0,
            by_index: HashMap::new(),
            by_path: HashMap::new(),
            path_bytes: 0,
            max_entries: max_entries.max(2),
            max_path_bytes,
        };
        t.by_index.insert(
            0,
            Entry {
                path: RelPath::root(),
                kind: Kind::Dir,
                identity: root,
                last_used: 0,
            },
        );
        t.by_path.insert(RelPath::root(), 0);
        t
    }

    pub fn root(&self) -> Handle {
        Handle::from_parts(self.epoch, 0)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    /// What `h` names, or None if it is not (or no longer) a handle of this
    /// server.
    pub fn resolve(&mut self, h: &Handle) -> Option<Resolved> {
        let (epoch, index) = h.parts();
        if epoch != self.epoch {
            return None;
        }
        self.tick += 1;
        let tick = self.tick;
        let e = self.by_index.get_mut(&index)?;
        e.last_used = tick;
        Some(Resolved {
            index,
            path: e.path.clone(),
            kind: e.kind,
            identity: e.identity,
        })
    }

    /// The handle of `path` (a file with this kind and identity). A path
    /// already in the table with the same identity keeps its handle; with
    /// another identity (the name now names a different file) the old
    /// handle is dropped and becomes STALE. Returns the handle and, when an
    /// old entry was dropped, its index (for the caller's caches).
    pub fn intern(
        &mut self,
        path: RelPath,
        kind: Kind,
        identity: (u64, u64),
    ) -> (Handle, Option<u64>) {
        self.tick += 1;
        let tick = self.tick;
        let mut dropped = None;
        if let Some(&index) = self.by_path.get(&path) {
            if let Some(e) = self.by_index.get_mut(&index) {
                if e.identity == identity && e.kind == kind {
                    e.last_used = tick;
                    return (Handle::from_parts(self.epoch, index), None);
                }
            }
            if index != 0 {
                self.remove(index);
                dropped = Some(index);
            }
        }
        self.evict_if_full(path.as_bytes().len());
        let index = self.next;
        self.next += 1;
        self.path_bytes += path.as_bytes().len();
        self.by_path.insert(path.clone(), index);
        self.by_index.insert(
            index,
            Entry {
                path,
                kind,
                identity,
                last_used: tick,
            },
        );
        (Handle::from_parts(self.epoch, index), dropped)
    }

    /// Drop the entry of `path` (after it was removed); returns its index.
    pub fn forget(&mut self, path: &RelPath) -> Option<u64> {
        let index = *self.by_path.get(path)?;
        if index == 0 {
            return None;
        }
        self.remove(index);
        Some(index)
    }

    fn remove(&mut self, index: u64) {
        if let Some(e) = self.by_index.remove(&index) {
            self.path_bytes -= e.path.as_bytes().len();
            if self.by_path.get(&e.path) == Some(&index) {
                self.by_path.remove(&e.path);
            }
        }
    }

    /// Make room for one more entry of `extra` path bytes: evict the least
    /// recently used eighth of the table (never the root).
    fn evict_if_full(&mut self, extra: usize) {
        if self.by_index.len() < self.max_entries && self.path_bytes + extra <= self.max_path_bytes
        {
            return;
        }
        let mut ages: Vec<(u64, u64)> = self
            .by_index
            .iter()
            .filter(|(&i, _)| i != 0)
            .map(|(&i, e)| (e.last_used, i))
            .collect();
        ages.sort_unstable();
        let n = (ages.len() / 8).max(1);
        for &(_, index) in ages.iter().take(n) {
            self.remove(index);
        }
        // Path bytes may still be over after one batch if paths are long.
        while self.path_bytes + extra > self.max_path_bytes && self.by_index.len() > 1 {
            let oldest = self
                .by_index
                .iter()
                .filter(|(&i, _)| i != 0)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(&i, _)| i);
            match oldest {
                Some(i) => self.remove(i),
                None => break,
            }
        }
    }
}

struct CachedFd {
    index: u64,
    file: Arc<File>,
    writable: bool,
    opened: Instant,
}

/// A few open files, each kept for at most `ttl`.
pub struct FdCache {
    entries: Vec<CachedFd>,
    max: usize,
    ttl: Duration,
}

impl FdCache {
    pub fn new(max: usize, ttl: Duration) -> FdCache {
        FdCache {
            entries: Vec::new(),
            max,
            ttl,
        }
    }

    /// The open file of handle `index`, if it is fresh and (when `write`)
    /// opened for writing.
    pub fn get(&mut self, index: u64, write: bool) -> Option<Arc<File>> {
        let now = Instant::now();
        let ttl = self.ttl;
        self.entries.retain(|e| now.duration_since(e.opened) < ttl);
        self.entries
            .iter()
            .find(|e| e.index == index && (e.writable || !write))
            .map(|e| Arc::clone(&e.file))
    }

    pub fn put(&mut self, index: u64, file: Arc<File>, writable: bool) {
        if self.max == 0 {
            return;
        }
        self.entries.retain(|e| e.index != index);
        if self.entries.len() >= self.max {
            if let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.opened)
                .map(|(i, _)| i)
            {
                self.entries.swap_remove(oldest);
            }
        }
        self.entries.push(CachedFd {
            index,
            file,
            writable,
            opened: Instant::now(),
        });
    }

    pub fn forget(&mut self, index: u64) {
        self.entries.retain(|e| e.index != index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        let mut r = RelPath::root();
        for c in s.split('/') {
            r = r.join(c.as_bytes()).unwrap();
        }
        r
    }

    #[test]
    fn handles_resolve_and_go_stale() {
        let mut t = HandleTable::new(77, (1, 1), 100, 1 << 20);
        let root = t.root();
        assert!(t.resolve(&root).unwrap().path.is_root());
        let (h, _) = t.intern(p("a"), Kind::File, (1, 2));
        assert_eq!(t.resolve(&h).unwrap().path, p("a"));
        // Same file again: same handle.
        assert_eq!(t.intern(p("a"), Kind::File, (1, 2)).0, h);
        // Replaced file: new handle, old one stale.
        let (h2, dropped) = t.intern(p("a"), Kind::File, (1, 3));
        assert_ne!(h2, h);
        assert!(dropped.is_some());
        assert!(t.resolve(&h).is_none());
        // Another epoch: stale.
        let (_, index) = h2.parts();
        assert!(t.resolve(&Handle::from_parts(78, index)).is_none());
        assert!(t.forget(&p("a")).is_some());
        assert!(t.resolve(&h2).is_none());
        assert!(t.forget(&RelPath::root()).is_none(), "the root stays");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = HandleTable::new(1, (0, 0), 64, 1 << 20);
        let root = t.root();
        for i in 0..1000u64 {
            t.intern(p(&format!("f{i}")), Kind::File, (0, i + 10));
            assert!(t.len() <= 64);
        }
        assert!(t.resolve(&root).is_some());
        let mut t = HandleTable::new(1, (0, 0), 1000, 100);
        for i in 0..100u64 {
            t.intern(p(&format!("file-number-{i}")), Kind::File, (0, i + 10));
            assert!(t.path_bytes <= 100);
        }
    }

    #[test]
    fn the_fd_cache_expires_and_is_bounded() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        let mut c = FdCache::new(2, Duration::from_secs(60));
        c.put(1, Arc::clone(&f), false);
        assert!(c.get(1, false).is_some());
        assert!(c.get(1, true).is_none());
        c.put(2, Arc::clone(&f), true);
        c.put(3, Arc::clone(&f), true);
        assert_eq!(c.entries.len(), 2);
        c.forget(3);
        assert!(c.get(3, false).is_none());
        let mut c = FdCache::new(2, Duration::ZERO);
        c.put(1, f, true);
        assert!(c.get(1, false).is_none());
    }
}
