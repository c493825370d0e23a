//! Swap-in ahead of the faults. In a sequential scan through swap, the
//! handler brings a run of pages per fault (read-around); read one run
//! at a time, every run starts from an idle backend (over rfs: an empty
//! window of requests, a round trip before the first byte) and nothing
//! moves while the handler evicts and copies. Here the next run is read
//! on a thread of its own while the handler and the application work on
//! the current one, and its pages are hashed there too (the check
//! against what was written stays the handler's).
//!
//! The backend is shared ([`SharedSwap`]): the handler keeps reading and
//! writing it directly (a lone fault must not wait for a thread to wake
//! up), the prefetch thread takes it for the length of one read.

use crate::page_buffer::PageBuffer;
use crate::placement;
use crate::swap::{SwapBackend, SwapError};
use std::io;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// One backend used from two threads, one call at a time.
#[derive(Clone)]
pub(crate) struct SharedSwap(Arc<Mutex<Box<dyn SwapBackend>>>);

impl SharedSwap {
    pub(crate) fn new(backend: Box<dyn SwapBackend>) -> SharedSwap {
        SharedSwap(Arc::new(Mutex::new(backend)))
    }

    /// The backend; a thread that panicked while holding it left it as
    /// it was (every call is a whole read or write), so it is used on.
    fn lock(&self) -> MutexGuard<'_, Box<dyn SwapBackend>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl SwapBackend for SharedSwap {
    fn describe(&self) -> String {
        self.lock().describe()
    }

    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        self.lock().write_page(slot, page)
    }

    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        self.lock().read_page(slot, page)
    }

    fn read_pages(
        &mut self,
        first: u64,
        pages: &mut [u8],
        page_size: usize,
    ) -> Result<(), SwapError> {
        self.lock().read_pages(first, pages, page_size)
    }

    fn write_pages(&mut self, pages: &[(u64, &[u8])]) -> Result<(), SwapError> {
        self.lock().write_pages(pages)
    }
}

/// A run to read: `pages` slots from `first` on, into `buffer`.
struct Request {
    first: u64,
    pages: usize,
    buffer: PageBuffer,
}

/// A run read ahead: its pages in `buffer`, and their xxh3-128 hashes
/// (or why the read failed).
pub(crate) struct Fetched {
    pub(crate) first: u64,
    pub(crate) pages: usize,
    pub(crate) buffer: PageBuffer,
    pub(crate) hashes: Result<Vec<u128>, SwapError>,
}

/// Where the one read ahead stands. `stale`: a slot of it was written
/// since it was asked for, so it may hold what was there before.
enum State {
    Idle,
    InFlight {
        first: u64,
        pages: usize,
        stale: bool,
    },
    Ready {
        fetched: Fetched,
        stale: bool,
    },
}

/// The prefetch thread and the one run it reads ahead.
pub(crate) struct Prefetcher {
    requests: Option<Sender<Request>>,
    results: Receiver<Fetched>,
    state: State,
    /// The buffer for the next request (two take turns: one being read
    /// into, one being copied from).
    spare: Option<PageBuffer>,
    page_size: usize,
    worker: Option<JoinHandle<()>>,
    cpus: Vec<usize>,
}

impl Prefetcher {
    /// A prefetch thread reading runs of up to `run_pages` pages of
    /// `page_size` bytes from `backend`; kept off `handler_cpu` (the
    /// read must go on while the handler copies, and a thread started by
    /// a pinned one would share its CPU).
    pub(crate) fn start(
        backend: SharedSwap,
        page_size: usize,
        run_pages: usize,
        handler_cpu: Option<usize>,
    ) -> io::Result<Prefetcher> {
        let (requests, inbox) = mpsc::channel::<Request>();
        let (outbox, results) = mpsc::channel::<Fetched>();
        let (placed, where_placed) = mpsc::channel::<io::Result<Vec<usize>>>();
        let worker = std::thread::Builder::new()
            .name("osprobe-swap-ahead".into())
            .spawn(move || {
                let cpus = match handler_cpu {
                    Some(cpu) => placement::away_from(cpu),
                    None => osprobe_core::affinity::allowed_cpus(),
                };
                if placed.send(cpus).is_ok() {
                    read_runs(backend, page_size, inbox, outbox);
                }
            })?;
        // The thread answers at once; if it died first, the error says so.
        let cpus = where_placed
            .recv()
            .map_err(|_| io::Error::other("the swap read-ahead thread ended at its start"))??;
        Ok(Prefetcher {
            requests: Some(requests),
            results,
            state: State::Idle,
            spare: Some(PageBuffer::new(page_size, run_pages)),
            page_size,
            worker: Some(worker),
            cpus,
        })
    }

    /// The CPUs the read-ahead thread may run on.
    pub(crate) fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Make the run read ahead `pages` slots from `first` on: nothing to
    /// do when that run is already asked for; another run still in
    /// flight is waited for and dropped (one read at a time: the backend
    /// serves one call at a time anyway).
    pub(crate) fn ask(&mut self, first: u64, pages: usize) {
        self.collect();
        match &self.state {
            State::InFlight {
                first: f,
                pages: p,
                stale: false,
            } if *f == first && *p >= pages => return,
            State::Ready {
                fetched,
                stale: false,
            } if fetched.first == first && fetched.pages >= pages => return,
            State::InFlight { .. } => self.wait_and_drop(),
            State::Ready { .. } => self.drop_ready(),
            State::Idle => {}
        }
        let mut buffer = match self.spare.take() {
            Some(b) if b.len() >= pages * self.page_size => b,
            _ => PageBuffer::new(self.page_size, pages),
        };
        let pages = pages.min(buffer.bytes(usize::MAX).len() / self.page_size);
        let Some(requests) = &self.requests else {
            self.spare = Some(buffer);
            return;
        };
        if let Err(mpsc::SendError(request)) = requests.send(Request {
            first,
            pages,
            buffer,
        }) {
            // The thread is gone (it panicked): no more reading ahead.
            self.spare = Some(request.buffer);
            self.requests = None;
            return;
        }
        self.state = State::InFlight {
            first,
            pages,
            stale: false,
        };
    }

    /// `slot` is being written: a run read ahead that covers it is not
    /// to be used.
    pub(crate) fn written(&mut self, slot: u64) {
        let covers = |first: u64, pages: usize| slot >= first && slot < first + pages as u64;
        match &mut self.state {
            State::InFlight {
                first,
                pages,
                stale,
            } if covers(*first, *pages) => *stale = true,
            State::Ready { fetched, stale } if covers(fetched.first, fetched.pages) => {
                *stale = true
            }
            _ => {}
        }
    }

    /// The run read ahead from slot `first` on, waiting for it if it is
    /// still being read. None when the run read ahead is stale (dropped)
    /// or starts elsewhere (it stays in flight; the next `ask` drops it).
    pub(crate) fn take(&mut self, first: u64) -> Option<Fetched> {
        self.collect();
        match &self.state {
            State::InFlight {
                first: f,
                stale: false,
                ..
            } if *f == first => {
                self.state = State::Idle;
                match self.results.recv() {
                    Ok(fetched) => Some(fetched),
                    // The thread died mid-read.
                    Err(_) => {
                        self.requests = None;
                        None
                    }
                }
            }
            State::Ready {
                fetched,
                stale: false,
            } if fetched.first == first => match std::mem::replace(&mut self.state, State::Idle) {
                State::Ready { fetched, .. } => Some(fetched),
                _ => None,
            },
            State::InFlight { stale: true, .. } => {
                self.wait_and_drop();
                None
            }
            State::Ready { .. } => {
                self.drop_ready();
                None
            }
            State::InFlight { .. } | State::Idle => None,
        }
    }

    /// A buffer handed out with a run, back for the next request.
    pub(crate) fn give_back(&mut self, buffer: PageBuffer) {
        if self.spare.as_ref().is_none_or(|s| s.len() < buffer.len()) {
            self.spare = Some(buffer);
        }
    }

    /// A run that arrived while nobody waited: ready.
    fn collect(&mut self) {
        if let State::InFlight { stale, .. } = self.state {
            match self.results.try_recv() {
                Ok(fetched) => self.state = State::Ready { fetched, stale },
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    self.requests = None;
                    self.state = State::Idle;
                }
            }
        }
    }

    /// Wait for the run in flight and drop it.
    fn wait_and_drop(&mut self) {
        if let State::InFlight { .. } = self.state {
            self.state = State::Idle;
            match self.results.recv() {
                Ok(fetched) => self.give_back(fetched.buffer),
                Err(_) => self.requests = None,
            }
        }
    }

    fn drop_ready(&mut self) {
        if let State::Ready { .. } = self.state {
            if let State::Ready { fetched, .. } = std::mem::replace(&mut self.state, State::Idle) {
                self.give_back(fetched.buffer);
            }
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        // No more requests: the thread ends after the read in flight.
        self.requests = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The prefetch thread: each run asked for is read and hashed, and sent
/// back, until the handler hangs up.
fn read_runs(
    mut backend: SharedSwap,
    page_size: usize,
    inbox: Receiver<Request>,
    outbox: Sender<Fetched>,
) {
    while let Ok(Request {
        first,
        pages,
        mut buffer,
    }) = inbox.recv()
    {
        let bytes = buffer.bytes(pages * page_size);
        let hashes = backend.read_pages(first, bytes, page_size).map(|()| {
            bytes
                .chunks_exact(page_size)
                .map(xxhash_rust::xxh3::xxh3_128)
                .collect()
        });
        let fetched = Fetched {
            first,
            pages,
            buffer,
            hashes,
        };
        if outbox.send(fetched).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swap::FileSwap;

    const PAGE: usize = 4096;

    fn swap_with(pages: u64) -> (tempfile::TempDir, SharedSwap) {
        let dir = tempfile::tempdir().unwrap();
        let mut swap = SharedSwap::new(Box::new(FileSwap::temporary(dir.path()).unwrap()));
        for slot in 0..pages {
            swap.write_page(slot, &[slot as u8 + 1; PAGE]).unwrap();
        }
        (dir, swap)
    }

    #[test]
    fn a_run_asked_for_comes_back_with_its_pages_and_their_hashes() {
        let (_dir, swap) = swap_with(8);
        let mut ahead = Prefetcher::start(swap, PAGE, 4, None).unwrap();
        ahead.ask(2, 4);
        // Asked again while in flight: still the one read.
        ahead.ask(2, 4);
        let mut fetched = ahead.take(2).expect("the run read ahead");
        assert_eq!((fetched.first, fetched.pages), (2, 4));
        let hashes = fetched.hashes.as_ref().unwrap().clone();
        let bytes = fetched.buffer.bytes(4 * PAGE);
        for (i, page) in bytes.chunks_exact(PAGE).enumerate() {
            assert!(page.iter().all(|&b| b == i as u8 + 3), "page {i}");
            assert_eq!(hashes[i], xxhash_rust::xxh3::xxh3_128(page));
        }
        ahead.give_back(fetched.buffer);
        // Nothing in flight any more.
        assert!(ahead.take(2).is_none());
    }

    #[test]
    fn a_run_elsewhere_or_written_to_is_not_handed_out() {
        let (_dir, swap) = swap_with(8);
        let mut ahead = Prefetcher::start(swap, PAGE, 4, None).unwrap();
        ahead.ask(0, 4);
        assert!(ahead.take(1).is_none(), "another first slot");
        // A new ask replaces the run in flight.
        ahead.ask(4, 4);
        assert!(ahead.take(0).is_none(), "replaced");
        ahead.written(5);
        assert!(ahead.take(4).is_none(), "a slot of it was written");
        ahead.ask(4, 2);
        let fetched = ahead.take(4).expect("asked anew");
        assert_eq!(fetched.pages, 2);
        assert!(fetched.buffer.ptr() as usize % PAGE == 0);
    }

    #[test]
    fn the_read_ahead_runs_off_the_handlers_cpu() {
        let (_dir, swap) = swap_with(4);
        let cpus = osprobe_core::affinity::allowed_cpus().unwrap();
        let handler = cpus[0];
        let mut ahead = Prefetcher::start(swap, PAGE, 4, Some(handler)).unwrap();
        if cpus.len() > 1 {
            assert!(!ahead.cpus().contains(&handler), "{:?}", ahead.cpus());
        }
        // And it reads as before.
        ahead.ask(0, 4);
        assert!(ahead.take(0).unwrap().hashes.is_ok());
    }

    #[test]
    fn a_failed_read_ahead_says_why() {
        let (_dir, swap) = swap_with(2);
        let mut ahead = Prefetcher::start(swap, PAGE, 4, None).unwrap();
        // Slots 2 and 3 lie past the end of the file.
        ahead.ask(0, 4);
        let fetched = ahead.take(0).unwrap();
        assert!(fetched.hashes.is_err());
    }
}
