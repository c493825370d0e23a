//! Disk space a server has promised: every admitted transfer reserves its
//! size up front, against the file system's free space and against the
//! server's own bound (`serve --max-bytes`), so two sessions that together
//! do not fit are told at the start, not by ENOSPC halfway through.
//!
//! A reservation counts in full until its transfer ends, even as the file
//! it reserved for fills the disk (and so shrinks the free space too): this
//! errs on the side of refusing, never of running out. Reservations are
//! kept per file system (by device number), so a scratch directory on
//! another disk does not eat into `--dir`'s space.
//!
//! `--max-bytes` bounds what the server keeps: the files in `--dir` when
//! it started, plus those it stored since, plus transfers in progress.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Why a transfer was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error(
        "not enough space in {}: the transfer needs {needed} bytes, {available} are free \
         and {reserved} of those are promised to transfers in progress",
        dir.display()
    )]
    NotEnoughSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
        reserved: u64,
    },
    #[error(
        "this server keeps at most {limit} bytes (--max-bytes): {used} are stored or being \
         received, the transfer needs {needed} more"
    )]
    OverLimit { limit: u64, used: u64, needed: u64 },
    #[error("cannot check free space in {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Default)]
struct Books {
    /// Bytes promised per file system, by device number.
    reserved: HashMap<u64, u64>,
    /// Bytes kept: files in --dir at start and files stored since.
    stored: u64,
    /// Bytes promised to transfers in progress, on any file system.
    in_flight: u64,
}

/// What a server has promised and kept.
pub struct Ledger {
    max_bytes: Option<u64>,
    books: Mutex<Books>,
}

/// One transfer's promise; released when dropped, or turned into stored
/// bytes by [`Reservation::kept`].
pub struct Reservation {
    ledger: Arc<Ledger>,
    device: u64,
    bytes: u64,
}

impl Ledger {
    /// A ledger bounded by `max_bytes` (None: only free space counts),
    /// with `already_stored` bytes kept before the server started.
    pub fn new(max_bytes: Option<u64>, already_stored: u64) -> Arc<Ledger> {
        Arc::new(Ledger {
            max_bytes,
            books: Mutex::new(Books {
                stored: already_stored,
                ..Books::default()
            }),
        })
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Promise `bytes` in `dir`, if its file system has them free beyond
    /// what is already promised there, and the server's bound allows.
    pub fn reserve(self: &Arc<Self>, dir: &Path, bytes: u64) -> Result<Reservation, SpaceError> {
        let io = |source| SpaceError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let device = std::fs::metadata(dir).map_err(io)?.dev();
        // Under the lock from the free-space check to the booking: two
        // sessions admitted at once cannot both count the same free bytes.
        let mut books = self.books();
        let available = osprobe_core::scratch::free_bytes(dir).map_err(io)?;
        let reserved = books.reserved.get(&device).copied().unwrap_or(0);
        if bytes > available.saturating_sub(reserved) {
            return Err(SpaceError::NotEnoughSpace {
                dir: dir.to_path_buf(),
                needed: bytes,
                available,
                reserved,
            });
        }
        if let Some(limit) = self.max_bytes {
            let used = books.stored.saturating_add(books.in_flight);
            if used.saturating_add(bytes) > limit {
                return Err(SpaceError::OverLimit {
                    limit,
                    used,
                    needed: bytes,
                });
            }
        }
        *books.reserved.entry(device).or_default() += bytes;
        books.in_flight += bytes;
        Ok(Reservation {
            ledger: Arc::clone(self),
            device,
            bytes,
        })
    }

    /// Bytes kept (at start and stored since).
    pub fn stored(&self) -> u64 {
        self.books().stored
    }
}

impl Reservation {
    /// The transfer's file was kept: its bytes now count as stored.
    pub fn kept(self) {
        self.ledger.books().stored += self.bytes;
        // Drop releases the promise itself.
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut books = self.ledger.books();
        if let Some(r) = books.reserved.get_mut(&self.device) {
            *r = r.saturating_sub(self.bytes);
            if *r == 0 {
                books.reserved.remove(&self.device);
            }
        }
        books.in_flight = books.in_flight.saturating_sub(self.bytes);
    }
}

/// Bytes in the regular files directly in `dir` (what a server's earlier
/// runs stored there); unreadable entries count as empty.
pub fn bytes_in(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promises_add_up_against_free_space() {
        let dir = std::env::temp_dir();
        let free = osprobe_core::scratch::free_bytes(&dir).unwrap();
        let ledger = Ledger::new(None, 0);
        let first = ledger.reserve(&dir, free / 2 + 1).unwrap();
        match ledger.reserve(&dir, free / 2 + 1) {
            Err(SpaceError::NotEnoughSpace { reserved, .. }) => assert_eq!(reserved, free / 2 + 1),
            other => panic!("the second half was promised too: {:?}", other.err()),
        }
        drop(first);
        ledger.reserve(&dir, free / 2 + 1).unwrap();
    }

    #[test]
    fn max_bytes_counts_stored_and_in_flight() {
        let dir = std::env::temp_dir();
        let ledger = Ledger::new(Some(1000), 300);
        let a = ledger.reserve(&dir, 400).unwrap();
        let err = ledger.reserve(&dir, 301).err().unwrap();
        assert!(err.to_string().contains("--max-bytes"), "{err}");
        assert!(matches!(
            err,
            SpaceError::OverLimit {
                limit: 1000,
                used: 700,
                needed: 301
            }
        ));
        a.kept();
        assert_eq!(ledger.stored(), 700);
        assert!(ledger.reserve(&dir, 301).is_err(), "kept bytes still count");
        let b = ledger.reserve(&dir, 300).unwrap();
        drop(b);
        assert_eq!(ledger.stored(), 700, "a dropped promise stores nothing");
    }
}
