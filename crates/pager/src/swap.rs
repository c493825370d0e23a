//! Where evicted pages go: swap backends behind one trait (a local file,
//! the remote file service), the swap map of slots, and [`Verified`],
//! which checks every page read back against the hash of what was
//! written (the pager wraps every backend in it).

use osprobe_rfs::client::{Client, Fd};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A failed or full swap backend, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    #[error("swap is full: all {slots} slots ({bytes} bytes) are in use")]
    Full { slots: u64, bytes: u64 },
    #[error("{backend}: {what} slot {slot}: {reason}")]
    Io {
        backend: String,
        what: &'static str,
        slot: u64,
        reason: String,
    },
    #[error("{backend}: short read of slot {slot}: {got} of {want} bytes")]
    Short {
        backend: String,
        slot: u64,
        got: usize,
        want: usize,
    },
    #[error("{backend}: slot {slot} read back is not what was written there (xxh3-128 {got:032x}, written {written:032x}): the swap is corrupted, and the page is not given to the application")]
    Corrupt {
        backend: String,
        slot: u64,
        written: u128,
        got: u128,
    },
    #[error("{backend}: slot {slot} is read before anything was written to it")]
    NeverWritten { backend: String, slot: u64 },
    #[error("{0}")]
    Open(String),
    /// The swap file could not be made on the remote file service; the
    /// client's error says whether the server refused (e.g. read-only).
    #[error("swap file beside '{near}' on rfs {server}: {source}")]
    Remote {
        near: String,
        server: std::net::SocketAddr,
        /// Boxed: a swap error travels in every fault's result.
        #[source]
        source: Box<osprobe_rfs::ClientError>,
    },
}

/// Storage for evicted pages, addressed by slot (slot * page size).
pub trait SwapBackend: Send {
    /// In words, for notes and errors: `file /tmp/x`, `rfs 127.0.0.1:1234 swap`.
    fn describe(&self) -> String;
    /// Write one page to `slot`.
    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError>;
    /// Read one page from `slot` into `page`.
    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError>;
    /// Read consecutive slots from `first` on into `pages` (a whole number
    /// of `page_size` pages): the read-around of a sequential swap-in.
    /// Backends that can move several pages in one request override it.
    fn read_pages(
        &mut self,
        first: u64,
        pages: &mut [u8],
        page_size: usize,
    ) -> Result<(), SwapError> {
        for (i, page) in pages.chunks_exact_mut(page_size).enumerate() {
            self.read_page(first + i as u64, page)?;
        }
        Ok(())
    }
    /// Write several pages, each to its slot (a batch of evictions):
    /// backends that can keep several writes in flight override it.
    fn write_pages(&mut self, pages: &[(u64, &[u8])]) -> Result<(), SwapError> {
        for (slot, page) in pages {
            self.write_page(*slot, page)?;
        }
        Ok(())
    }
}

/// `pages` (slot, contents) sorted by slot and cut into runs of
/// consecutive slots: what one contiguous transfer can carry.
pub fn slot_runs<'a>(pages: &[(u64, &'a [u8])]) -> Vec<Vec<(u64, &'a [u8])>> {
    let mut sorted = pages.to_vec();
    sorted.sort_by_key(|(slot, _)| *slot);
    let mut runs: Vec<Vec<(u64, &[u8])>> = Vec::new();
    for (slot, page) in sorted {
        match runs.last_mut() {
            Some(run) if run.last().is_some_and(|(s, _)| *s + 1 == slot) => run.push((slot, page)),
            _ => runs.push(vec![(slot, page)]),
        }
    }
    runs
}

/// The swap map: which slots are free. A page keeps its slot for as long
/// as the pager lives (so a clean page need not be written again), and
/// the map refuses more pages than the backend may hold.
#[derive(Debug)]
pub struct SwapMap {
    capacity: u64,
    next_unused: u64,
    free: Vec<u64>,
}

impl SwapMap {
    pub fn new(capacity_slots: u64) -> SwapMap {
        SwapMap {
            capacity: capacity_slots,
            next_unused: 0,
            free: Vec::new(),
        }
    }

    /// A free slot, or None when the swap is full.
    pub fn allocate(&mut self) -> Option<u64> {
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        if self.next_unused < self.capacity {
            self.next_unused += 1;
            return Some(self.next_unused - 1);
        }
        None
    }

    pub fn release(&mut self, slot: u64) {
        debug_assert!(slot < self.next_unused && !self.free.contains(&slot));
        self.free.push(slot);
    }

    pub fn in_use(&self) -> u64 {
        self.next_unused - self.free.len() as u64
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// A backend whose pages are checked on the way back: the xxh3-128 of
/// every page written is kept (17 bytes per slot, in memory), and a page
/// read back with another hash is an error, never data. A swap file can
/// be changed behind the pager's back (on an rfs server by anyone with
/// access to the export, or by a disk), and a changed page handed to the
/// application would be silent corruption of its memory.
pub struct Verified {
    inner: Box<dyn SwapBackend>,
    /// The hash of what was written to each slot (bytes, so that an
    /// entry takes 17 bytes, not the 32 of an aligned `Option<u128>`);
    /// None: never written.
    written: Vec<Option<[u8; 16]>>,
}

impl Verified {
    pub fn new(inner: Box<dyn SwapBackend>) -> Verified {
        Verified {
            inner,
            written: Vec::new(),
        }
    }
}

impl SwapBackend for Verified {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        let hash = xxhash_rust::xxh3::xxh3_128(page);
        let at = self.slot_index(slot)?;
        // Forgotten first: if the write fails half-way, the slot holds
        // nothing that may be read back.
        self.written[at] = None;
        self.inner.write_page(slot, page)?;
        self.written[at] = Some(hash.to_le_bytes());
        Ok(())
    }

    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        let written = self.written_hash(slot)?;
        self.inner.read_page(slot, page)?;
        self.check(slot, written, page)
    }

    fn read_pages(
        &mut self,
        first: u64,
        pages: &mut [u8],
        page_size: usize,
    ) -> Result<(), SwapError> {
        let count = (pages.len() / page_size) as u64;
        let written = (first..first + count)
            .map(|slot| self.written_hash(slot))
            .collect::<Result<Vec<u128>, SwapError>>()?;
        self.inner.read_pages(first, pages, page_size)?;
        let mut result = Ok(());
        for (i, page) in pages.chunks_exact_mut(page_size).enumerate() {
            if result.is_ok() {
                result = self.check(first + i as u64, written[i], page);
            } else {
                page.fill(0);
            }
        }
        if result.is_err() {
            pages.fill(0);
        }
        result
    }

    fn write_pages(&mut self, pages: &[(u64, &[u8])]) -> Result<(), SwapError> {
        let hashes: Vec<u128> = pages
            .iter()
            .map(|(_, page)| xxhash_rust::xxh3::xxh3_128(page))
            .collect();
        self.write_pages_hashed(pages, &hashes)
    }
}

impl Verified {
    /// [`SwapBackend::write_pages`] for a caller that already hashed the
    /// pages (the pager hashes a page to tell whether it changed; hashing
    /// it again here would cost as much once more).
    pub fn write_pages_hashed(
        &mut self,
        pages: &[(u64, &[u8])],
        hashes: &[u128],
    ) -> Result<(), SwapError> {
        debug_assert_eq!(pages.len(), hashes.len());
        let mut at = Vec::with_capacity(pages.len());
        for (slot, _) in pages {
            let index = self.slot_index(*slot)?;
            // Forgotten first: a batch that fails half-way leaves no slot
            // that could be read back with what it held before.
            self.written[index] = None;
            at.push(index);
        }
        self.inner.write_pages(pages)?;
        for (index, hash) in at.into_iter().zip(hashes) {
            self.written[index] = Some(hash.to_le_bytes());
        }
        Ok(())
    }

    /// The hash of what was written to `slot` (after a successful read,
    /// the hash of what was read), or why it cannot be read.
    pub fn written_hash(&self, slot: u64) -> Result<u128, SwapError> {
        usize::try_from(slot)
            .ok()
            .and_then(|at| self.written.get(at).copied().flatten())
            .map(u128::from_le_bytes)
            .ok_or_else(|| SwapError::NeverWritten {
                backend: self.describe(),
                slot,
            })
    }

    /// The index of `slot` in `written`, grown to hold it.
    fn slot_index(&mut self, slot: u64) -> Result<usize, SwapError> {
        let at = usize::try_from(slot).map_err(|_| SwapError::Io {
            backend: self.describe(),
            what: "writing",
            slot,
            reason: "slot number out of range".into(),
        })?;
        if at >= self.written.len() {
            self.written.resize(at + 1, None);
        }
        Ok(at)
    }

    /// A page read back from `slot` must hash to what was written there.
    fn check(&self, slot: u64, written: u128, page: &mut [u8]) -> Result<(), SwapError> {
        let got = xxhash_rust::xxh3::xxh3_128(page);
        if got != written {
            // The buffer is the handler's own; clear it anyway so that
            // nothing can copy the wrong bytes on by mistake.
            page.fill(0);
            return Err(SwapError::Corrupt {
                backend: self.describe(),
                slot,
                written,
                got,
            });
        }
        Ok(())
    }
}

/// A swap file on a local file system. Reads come from the page cache
/// when the file's pages are cached (as the kernel's own swap-in from a
/// swap cache would); the experiments say so.
///
/// The file's name is removed as soon as it is open: a swap file means
/// nothing once its pager is gone, and this way it goes with the process
/// however that ends (Ctrl-C, SIGBUS, SIGKILL).
pub struct FileSwap {
    file: File,
    path: PathBuf,
}

impl FileSwap {
    /// Create the swap file at `path` (an existing file is an error: it
    /// would be overwritten) and remove its name at once.
    pub fn create(path: &Path) -> Result<FileSwap, SwapError> {
        let open_error =
            |e: std::io::Error| SwapError::Open(format!("swap file {}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(open_error)?;
        std::fs::remove_file(path).map_err(open_error)?;
        Ok(FileSwap {
            file,
            path: path.to_path_buf(),
        })
    }

    /// A swap file in `dir` with a name of its own.
    pub fn temporary(dir: &Path) -> Result<FileSwap, SwapError> {
        let tag = osprobe_core::random::os_random_bytes::<8>()
            .map_err(|e| SwapError::Open(format!("a name for the swap file: {e}")))?;
        let name = format!(
            "osprobe-swap-{}-{:016x}",
            std::process::id(),
            u64::from_ne_bytes(tag)
        );
        FileSwap::create(&dir.join(name))
    }

    fn io(&self, what: &'static str, slot: u64, e: std::io::Error) -> SwapError {
        SwapError::Io {
            backend: self.describe(),
            what,
            slot,
            reason: e.to_string(),
        }
    }
}

impl SwapBackend for FileSwap {
    fn describe(&self) -> String {
        format!("swap file {} (unlinked)", self.path.display())
    }

    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        let offset = slot * page.len() as u64;
        self.file
            .write_all_at(page, offset)
            .map_err(|e| self.io("writing", slot, e))
    }

    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        let offset = slot * page.len() as u64;
        self.file
            .read_exact_at(page, offset)
            .map_err(|e| self.io("reading", slot, e))
    }

    fn read_pages(
        &mut self,
        first: u64,
        pages: &mut [u8],
        page_size: usize,
    ) -> Result<(), SwapError> {
        self.file
            .read_exact_at(pages, first * page_size as u64)
            .map_err(|e| self.io("reading", first, e))
    }
}

/// A swap file on the remote file service (SOS paged to NFS). A page
/// travels as page/packet requests, all in flight at once within the
/// client's window.
///
/// The file is the server's scratch file of this client's session
/// ([`Client::create_scratch`]): created exclusively under a random name,
/// so two pagers on one server never share it, and removed by the server
/// when the session ends, however the pager ends (kill -9 and SIGBUS
/// included: a TCP session ends with its connection, a UDP one when it
/// falls silent for the server's idle time).
pub struct RfsSwap {
    client: Client,
    fd: Fd,
    near: String,
}

impl RfsSwap {
    /// A scratch swap file beside the name `near` on the server `client`
    /// talks to (`near` itself is never touched).
    pub fn create(mut client: Client, near: &str) -> Result<RfsSwap, SwapError> {
        let fd = client
            .create_scratch(near)
            .map_err(|source| SwapError::Remote {
                near: near.to_string(),
                server: client.server(),
                source: Box::new(source),
            })?;
        Ok(RfsSwap {
            client,
            fd,
            near: near.to_string(),
        })
    }

    fn io(&self, what: &'static str, slot: u64, reason: String) -> SwapError {
        SwapError::Io {
            backend: self.describe(),
            what,
            slot,
            reason,
        }
    }
}

impl Drop for RfsSwap {
    fn drop(&mut self) {
        // If this fails (the server is gone), the server removes the file
        // when the session ends.
        let _ = self.client.discard(self.fd);
    }
}

impl SwapBackend for RfsSwap {
    fn describe(&self) -> String {
        format!(
            "rfs {} swap (a scratch file of the session, beside '{}')",
            self.client.server(),
            self.near
        )
    }

    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        let offset = slot * page.len() as u64;
        match self.client.write_at(self.fd, offset, page) {
            Ok(n) if n == page.len() => Ok(()),
            Ok(n) => Err(self.io(
                "writing",
                slot,
                format!("wrote {n} of {} bytes", page.len()),
            )),
            Err(e) => Err(self.io("writing", slot, e.to_string())),
        }
    }

    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        let offset = slot * page.len() as u64;
        let want = page.len();
        match self.client.read_at(self.fd, offset, page) {
            Ok(n) if n == want => Ok(()),
            Ok(got) => Err(SwapError::Short {
                backend: self.describe(),
                slot,
                got,
                want,
            }),
            Err(e) => Err(self.io("reading", slot, e.to_string())),
        }
    }

    /// One `read_at` of the whole run: its requests go out `window` at a
    /// time instead of one round trip per page.
    fn read_pages(
        &mut self,
        first: u64,
        pages: &mut [u8],
        page_size: usize,
    ) -> Result<(), SwapError> {
        let want = pages.len();
        match self
            .client
            .read_at(self.fd, first * page_size as u64, pages)
        {
            Ok(n) if n == want => Ok(()),
            Ok(got) => Err(SwapError::Short {
                backend: self.describe(),
                slot: first,
                got,
                want,
            }),
            Err(e) => Err(self.io("reading", first, e.to_string())),
        }
    }

    /// Write-behind of a batch of evictions: each run of consecutive
    /// slots is one `write_at`, its requests `window` in flight.
    fn write_pages(&mut self, pages: &[(u64, &[u8])]) -> Result<(), SwapError> {
        let mut staging = Vec::new();
        for run in slot_runs(pages) {
            let first = run[0].0;
            let page_size = run[0].1.len();
            staging.clear();
            for (_, page) in &run {
                staging.extend_from_slice(page);
            }
            match self
                .client
                .write_at(self.fd, first * page_size as u64, &staging)
            {
                Ok(n) if n == staging.len() => {}
                Ok(n) => {
                    return Err(self.io(
                        "writing",
                        first,
                        format!("wrote {n} of {} bytes", staging.len()),
                    ))
                }
                Err(e) => return Err(self.io("writing", first, e.to_string())),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_swap_map_reuses_released_slots_and_refuses_past_capacity() {
        let mut map = SwapMap::new(2);
        assert_eq!(map.allocate(), Some(0));
        assert_eq!(map.allocate(), Some(1));
        assert_eq!(map.allocate(), None);
        map.release(0);
        assert_eq!(map.in_use(), 1);
        assert_eq!(map.allocate(), Some(0));
        assert_eq!(map.allocate(), None);
    }

    #[test]
    fn slot_runs_sort_and_join_consecutive_slots() {
        let (a, b, c) = ([1u8][..].to_vec(), [2u8][..].to_vec(), [3u8][..].to_vec());
        let runs = slot_runs(&[(5, &c[..]), (3, &a[..]), (4, &b[..]), (9, &a[..])]);
        let slots: Vec<Vec<u64>> = runs
            .iter()
            .map(|r| r.iter().map(|(s, _)| *s).collect())
            .collect();
        assert_eq!(slots, vec![vec![3, 4, 5], vec![9]]);
        assert_eq!(runs[0][2].1, &c[..]);
    }

    #[test]
    fn verified_batches_read_back_what_was_written_and_catch_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut swap = Verified::new(Box::new(FileSwap::temporary(dir.path()).unwrap()));
        let pages: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 4096]).collect();
        let batch: Vec<(u64, &[u8])> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| (10 + i as u64, &p[..]))
            .collect();
        swap.write_pages(&batch).unwrap();
        let mut back = vec![0u8; 4 * 4096];
        swap.read_pages(10, &mut back, 4096).unwrap();
        assert_eq!(back, pages.concat());
        // A slot never written in the run: refused before reading.
        assert!(matches!(
            swap.read_pages(12, &mut back, 4096),
            Err(SwapError::NeverWritten { slot: 14, .. })
        ));
        // A page changed behind the pager's back: an error, zeros only.
        swap.inner.write_page(11, &[9u8; 4096]).unwrap();
        let e = swap.read_pages(10, &mut back, 4096).unwrap_err();
        assert!(matches!(e, SwapError::Corrupt { slot: 11, .. }), "{e}");
        assert!(back.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_file_swap_returns_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut swap = FileSwap::temporary(dir.path()).unwrap();
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        swap.write_page(3, &page).unwrap();
        let mut back = vec![0u8; 4096];
        swap.read_page(3, &mut back).unwrap();
        assert_eq!(back, page);
        // A slot never written lies past the end of the file.
        assert!(swap.read_page(9, &mut back).is_err());
    }
}
