//! The live pager: a region of the application's memory whose every page
//! fault is served by a handler thread, within a fixed number of frames.
//! With [`Serve::FaultingThread`] the faulting thread serves its own
//! zero-fills and referenced-bit faults in a SIGBUS handler and hands the
//! rest to the pager's thread (see `faulting_thread.rs` beside this file).
//!
//! # How the region is built, and where the referenced bit comes from
//!
//! The region's memory is a memfd (shared memory, THP off) mapped twice:
//! once for the application, registered with userfaultfd for *missing*
//! and *minor* faults, and once for the handler, not registered. A page
//! is "resident" when it is in the memfd's page cache.
//!
//! - First touch (zero-fill): the page is missing from the page cache;
//!   the handler answers with UFFDIO_ZEROPAGE.
//! - Swap-in: the handler reads the page from the swap backend and
//!   answers with UFFDIO_COPY, which puts it in the page cache and maps it.
//! - Referenced bit: SOS did not know where to get it; the MMU's accessed
//!   bit is not visible from user space. Here the bit is *clearing the
//!   application's mapping of the page* (MADV_DONTNEED on a shared mapping
//!   drops the page-table entry but keeps the page in the page cache). The
//!   next touch is then a minor fault, which the handler records as "the
//!   bit is set" and resolves with UFFDIO_CONTINUE (map the page that is
//!   already there). Cost: one madvise per cleared bit and one minor
//!   fault (a round trip through the handler, a few microseconds) per page
//!   referenced after its bit was cleared. Pages whose bit is set run at
//!   full speed; policies only read bits when they choose a victim.
//!   (The alternative, write-protect tracking, sees only writes.)
//! - Eviction never loses a write: the application's mapping of the page
//!   is dropped *first* (any touch from then on waits in a fault the
//!   handler does not serve until the eviction is over), then the page is
//!   compared with what it held when loaded and written to swap if it
//!   changed, and only then removed from the page cache (punch a hole).
//!   A fault queued meanwhile finds the page in swap and is served as a
//!   swap-in: the handler decides from its own page table, never from the
//!   fault's kind.
//! - Dirty bit: not visible from user space either. Where the kernel can
//!   write-protect shared memory, a page swapped in is mapped
//!   write-protected and its first write is a fault the handler sees
//!   ([`crate::dirty`]): a page with no such fault leaves unhashed and
//!   unwritten, without the `madvise` (a write meanwhile waits in its
//!   fault). Otherwise (and for pages zero-filled or mapped writable) a
//!   page is "changed" when the 128-bit xxh3 hash of its contents differs
//!   from the hash taken when it was loaded (about 0.2 us per page; the
//!   chance that a change goes unnoticed is 2^-128 per eviction). A clean
//!   page keeps its swap slot and is not written again; a page still all
//!   zeros that never had a slot goes back to "untouched".
//! - Swap integrity: every page written to swap has its xxh3-128 kept
//!   ([`crate::swap::Verified`]); a page read back with another hash is
//!   an error like a failing backend, never data in the application's
//!   memory.
//! - Errors: a swap backend that fails or is full, or an access outside
//!   every region, makes the faulting access raise SIGBUS (UFFDIO_POISON,
//!   or tgkill on kernels without it), with the reason logged on stderr
//!   and kept in [`Pager::last_error`]. The application is never handed a
//!   page it did not write.

mod faulting_thread;

pub use faulting_thread::{NotThisProcess, Serve, SetupError as FaultingThreadError, UnknownServe};

use crate::dirty::DirtyTracking;
use crate::error::FaultError;
use crate::page_buffer::PageBuffer;
use crate::policy::{FrameId, Policy, ReferenceBits};
use crate::swap::{SwapBackend, SwapError, SwapMap, Verified};
use crate::swap_ahead::{Fetched, Prefetcher, SharedSwap};
use crate::table::{Frame, FrameTable, PageState, PageTable, Region};
use crate::uffd::{Fault, OpenError, Userfaultfd, PAGEFAULT_FLAG_WP, PAGEFAULT_FLAG_WRITE};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why the pager could not start.
#[derive(Debug, thiserror::Error)]
pub enum PagerError {
    #[error(transparent)]
    Userfaultfd(#[from] OpenError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Region(#[from] crate::error::RegionError),
    #[error(transparent)]
    FaultingThread(#[from] faulting_thread::SetupError),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> PagerError {
    let what = what.into();
    move |source| PagerError::Io { what, source }
}

/// What the pager manages and how.
pub struct PagerConfig {
    /// Pages in the region (the application's virtual memory).
    pub pages: u64,
    /// Frames: at most this many pages are resident at once.
    pub frames: usize,
    pub policy: Box<dyn Policy>,
    pub swap: Box<dyn SwapBackend>,
    /// Slots the swap may use (default: one per page).
    pub swap_slots: Option<u64>,
    /// How long the handler polls for the next fault before it sleeps:
    /// spinning saves the wake-up (several microseconds across CPUs) at
    /// the price of a busy CPU while faults keep coming.
    pub spin: Duration,
    /// Read-only regions (name, first page, pages); the rest is one
    /// writable region "data".
    pub read_only: Vec<(String, u64, u64)>,
    /// Keep the handler thread on this CPU.
    pub handler_cpu: Option<usize>,
    /// Swap-in read-around: a fault on the page after the last one swapped
    /// in (a sequential scan) brings in up to this many pages whose slots
    /// follow its slot, with one backend read and one UFFDIO_COPY. 1: off.
    pub read_around: usize,
    /// Victims evicted together when no frame is free: their changed
    /// pages are written behind in one batch (over rfs, a window of
    /// writes in flight instead of one round trip each). 1: one at a time.
    pub evict_batch: usize,
    /// The dirty bit by write-protect when the kernel has it (the
    /// default): pages swapped in are mapped write-protected, and a page
    /// never written leaves without being hashed or written. False: every
    /// page leaving is hashed ([`DirtyTracking`]).
    pub write_protect: bool,
    /// Which thread serves a fault: the handler thread (any access, the
    /// default) or the faulting thread itself, in a SIGBUS handler
    /// (threads of this process only; a system call touching the region
    /// gets EFAULT). See [`Serve`].
    pub serve: Serve,
}

impl PagerConfig {
    /// `pages` of memory in `frames` frames, nothing else set: one
    /// writable region, one swap slot per page, a handler that sleeps
    /// between faults on whatever CPU the scheduler picks.
    pub fn new(
        pages: u64,
        frames: usize,
        policy: Box<dyn Policy>,
        swap: Box<dyn SwapBackend>,
    ) -> PagerConfig {
        PagerConfig {
            pages,
            frames,
            policy,
            swap,
            swap_slots: None,
            spin: Duration::ZERO,
            read_only: Vec::new(),
            handler_cpu: None,
            read_around: 1,
            evict_batch: 1,
            write_protect: true,
            serve: Serve::HandlerThread,
        }
    }
}

/// The counters, shared with the handler thread.
#[derive(Debug, Default)]
struct Counters {
    faults: AtomicU64,
    zero_fills: AtomicU64,
    swap_ins: AtomicU64,
    referenced_bit_faults: AtomicU64,
    duplicate_faults: AtomicU64,
    evictions: AtomicU64,
    write_backs: AtomicU64,
    bits_cleared: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    failures: AtomicU64,
    read_around_pages: AtomicU64,
    read_ahead_pages: AtomicU64,
    dirty_bit_faults: AtomicU64,
    clean_drops: AtomicU64,
}

/// A snapshot of the counters. `faults` counts every fault the handler
/// served; it equals `zero_fills + swap_ins + referenced_bit_faults`
/// (faults of several threads on one page that the first one's service
/// already resolved are `duplicate_faults`, not in `faults`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PagerCounters {
    pub faults: u64,
    pub zero_fills: u64,
    pub swap_ins: u64,
    pub referenced_bit_faults: u64,
    pub duplicate_faults: u64,
    pub evictions: u64,
    /// Evictions of a changed page, written to swap.
    pub write_backs: u64,
    /// Referenced bits cleared by the policy (one madvise each).
    pub bits_cleared: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Faults answered with SIGBUS.
    pub failures: u64,
    /// Pages brought in by read-around beside the faulting one (in
    /// `bytes_in`, not in `swap_ins`: no fault asked for them).
    pub read_around_pages: u64,
    /// Pages (faulting ones and read-around alike) mapped from a run
    /// read ahead, while the application used the run before it.
    pub read_ahead_pages: u64,
    /// First writes to a page mapped write-protected: the dirty bit set
    /// (not in `faults`: the page was there already).
    pub dirty_bit_faults: u64,
    /// Evictions of a page write-protect showed unchanged: dropped
    /// without a hash or a write.
    pub clean_drops: u64,
}

impl Counters {
    fn snapshot(&self) -> PagerCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PagerCounters {
            faults: get(&self.faults),
            zero_fills: get(&self.zero_fills),
            swap_ins: get(&self.swap_ins),
            referenced_bit_faults: get(&self.referenced_bit_faults),
            duplicate_faults: get(&self.duplicate_faults),
            evictions: get(&self.evictions),
            write_backs: get(&self.write_backs),
            bits_cleared: get(&self.bits_cleared),
            bytes_in: get(&self.bytes_in),
            bytes_out: get(&self.bytes_out),
            failures: get(&self.failures),
            read_around_pages: get(&self.read_around_pages),
            read_ahead_pages: get(&self.read_ahead_pages),
            dirty_bit_faults: get(&self.dirty_bit_faults),
            clean_drops: get(&self.clean_drops),
        }
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Service times measured by the handler, from reading the fault to the
/// resolving ioctl's return, in nanoseconds (the first `SAMPLE_CAP` of
/// each kind).
#[derive(Debug, Clone, Default)]
pub struct ServiceTimes {
    pub zero_fill: Vec<f64>,
    pub swap_in: Vec<f64>,
    pub referenced_bit: Vec<f64>,
    /// Of the swap-ins: the part spent evicting a victim (hash, write-back).
    pub eviction: Vec<f64>,
}

const SAMPLE_CAP: usize = 1 << 16;

impl ServiceTimes {
    /// Room for every sample a signal handler records (zero-fills and
    /// referenced-bit faults), so that recording never allocates there.
    fn for_signals() -> ServiceTimes {
        ServiceTimes {
            zero_fill: Vec::with_capacity(SAMPLE_CAP),
            referenced_bit: Vec::with_capacity(SAMPLE_CAP),
            ..ServiceTimes::default()
        }
    }
}

fn record(samples: &mut Vec<f64>, ns: f64) {
    if samples.len() < SAMPLE_CAP {
        samples.push(ns);
    }
}

/// A mapping that is unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) addr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain memory; who touches it is the pager's
// business (the handler only ever touches resident pages).
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn shared(fd: &OwnedFd, len: usize) -> Result<Mapping, PagerError> {
        // SAFETY: a fresh shared mapping of our memfd.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io_error("mapping the region")(io::Error::last_os_error()));
        }
        let mapping = Mapping {
            addr: addr.cast(),
            len,
        };
        // Huge pages would make a "page" 2 MiB; the memfd's THP setting
        // (shmem_enabled) usually says never, this makes sure.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
        Ok(mapping)
    }
}

impl Mapping {
    /// Page `page` of the mapping, for the handler: called only for
    /// resident pages (in the page cache), so reading through this
    /// unregistered mapping neither faults to the handler nor allocates;
    /// the application cannot write the page (its mapping is dropped
    /// before a page is read for eviction).
    fn page(&self, page: u64, page_size: usize) -> &[u8] {
        let offset = page as usize * page_size;
        debug_assert!(offset + page_size <= self.len);
        // SAFETY: inside the mapping (the page table's pages); see above.
        unsafe { std::slice::from_raw_parts(self.addr.add(offset), page_size) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// The running pager. The region's memory is the [`Pager::len`] bytes
/// from [`Pager::as_ptr`]; dropping the pager unmaps it first (a later
/// access is a segmentation fault, never a silent zero page) and then
/// stops the handler.
pub struct Pager {
    // Field order is drop order: the application's mapping goes first.
    app: Mapping,
    stop: Arc<AtomicBool>,
    /// Faulting-thread mode: the pager as the SIGBUS handler finds it.
    faulting: Option<faulting_thread::Registration>,
    handler: Option<JoinHandle<ServiceTimes>>,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    page_size: usize,
    pages: u64,
    frames: usize,
    policy_name: &'static str,
    swap_description: String,
    user_mode_only: bool,
    read_ahead_cpus: Option<Vec<usize>>,
    dirty_tracking: DirtyTracking,
    serve: Serve,
}

impl Pager {
    /// Build the region and start the handler thread.
    pub fn start(config: PagerConfig) -> Result<Pager, PagerError> {
        let page_size = page_size();
        let len = check_config(&config, page_size)?;
        let uffd = match config.serve {
            Serve::HandlerThread => Userfaultfd::open()?,
            Serve::FaultingThread => Userfaultfd::open_sigbus()?,
        };
        let memfd = memfd(len)?;
        let app = Mapping::shared(&memfd, len)?;
        let own = Mapping::shared(&memfd, len)?;
        let dirty_tracking = register_region(&uffd, &app, &config)?;

        let table = page_table(&config, &app, page_size)?;

        let counters = Arc::new(Counters::default());
        let last_error = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let user_mode_only = uffd.user_mode_only;
        let policy_name = config.policy.name();
        let swap_description = config.swap.describe();
        let frames = config.frames;
        let (swap, ahead) = swap_with_ahead(
            config.swap,
            page_size,
            config.read_around,
            config.handler_cpu,
        )?;
        let read_ahead_cpus = ahead.as_ref().map(|a| a.cpus().to_vec());
        let handler = Handler {
            uffd,
            memfd,
            app_base: app.addr as u64,
            own,
            page_size,
            table,
            frames: FrameTable::new(config.frames),
            swap_map: SwapMap::new(config.swap_slots.unwrap_or(config.pages)),
            // Every page read back from swap is checked against what was
            // written: corruption ends the access with SIGBUS and the reason.
            swap,
            ahead,
            policy: config.policy,
            counters: counters.clone(),
            last_error: last_error.clone(),
            times: ServiceTimes::default(),
            buffer: PageBuffer::new(page_size, config.read_around),
            zero_hash: xxhash_rust::xxh3::xxh3_128(&vec![0u8; page_size]),
            spin: config.spin,
            read_around: config.read_around,
            evict_batch: config.evict_batch,
            next_sequential: None,
            write_protect: dirty_tracking == DirtyTracking::WriteProtect,
            continue_protected: true,
            write_fault: false,
        };
        let (handler, faulting) =
            spawn_handler(handler, config.serve, config.handler_cpu, &stop, len as u64)?;
        Ok(Pager {
            app,
            stop,
            faulting,
            handler: Some(handler),
            counters,
            last_error,
            page_size,
            pages: config.pages,
            frames,
            policy_name,
            swap_description,
            user_mode_only,
            read_ahead_cpus,
            dirty_tracking,
            serve: config.serve,
        })
    }

    /// The first byte of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.app.addr
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.app.len
    }

    pub fn is_empty(&self) -> bool {
        self.app.len == 0
    }

    /// The whole region, for one thread at a time.
    pub fn memory(&mut self) -> &mut [u8] {
        // SAFETY: the mapping lives as long as self; &mut self makes this
        // the only safe view of it.
        unsafe { std::slice::from_raw_parts_mut(self.app.addr, self.app.len) }
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy_name
    }

    pub fn swap_description(&self) -> &str {
        &self.swap_description
    }

    /// Opened with UFFD_USER_MODE_ONLY (an unprivileged process): a
    /// system call that reads or writes the region gets EFAULT.
    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }

    /// Which thread serves this pager's faults.
    pub fn serve(&self) -> Serve {
        self.serve
    }

    pub fn counters(&self) -> PagerCounters {
        self.counters.snapshot()
    }

    /// How this pager tells a changed page from a clean one.
    pub fn dirty_tracking(&self) -> &DirtyTracking {
        &self.dirty_tracking
    }

    /// The CPUs the swap read-ahead thread may run on (None: read-around
    /// off, no such thread); never the handler's when another exists.
    pub fn read_ahead_cpus(&self) -> Option<&[usize]> {
        self.read_ahead_cpus.as_deref()
    }

    /// Why the last faulting access got SIGBUS, if one did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Unmap the region, stop the handler and return the final counters
    /// and the service times it measured.
    pub fn finish(mut self) -> (PagerCounters, ServiceTimes) {
        let times = self.stop_handler();
        (self.counters.snapshot(), times)
    }

    fn stop_handler(&mut self) -> ServiceTimes {
        // SAFETY: remove the application's view before the handler goes,
        // so nothing can fault once nobody serves faults. Leave a
        // PROT_NONE reservation so the address is not reused while
        // `app` still names it.
        unsafe {
            libc::mmap(
                self.app.addr.cast(),
                self.app.len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        // No SIGBUS handler may still be serving this pager when it stops
        // (this waits for one that is).
        drop(self.faulting.take());
        self.stop.store(true, Ordering::Release);
        match self.handler.take().map(|h| h.join()) {
            Some(Ok(times)) => times,
            _ => ServiceTimes::default(),
        }
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        if self.handler.is_some() {
            self.stop_handler();
        }
    }
}

/// For a program whose own memory is served by the pager: the pager
/// answers a fault it cannot serve (swap full or failing) with SIGBUS
/// after logging why; this makes that SIGBUS end the process with one
/// more line and exit code 1 instead of a core dump.
pub fn exit_on_sigbus() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MESSAGE: &[u8] =
            b"osprobe: the workload touched a page the pager could not serve (reason above); stopped\n";
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
            libc::_exit(1);
        }
    }
    // SAFETY: installing a handler that only writes and exits.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// Register the application's mapping with the userfaultfd, for
/// write-protect faults too where they track the dirty bit.
fn register_region(
    uffd: &Userfaultfd,
    app: &Mapping,
    config: &PagerConfig,
) -> Result<DirtyTracking, PagerError> {
    let wanted = wants_write_protect(config);
    crate::dirty::register(uffd, app.addr as u64, app.len as u64, wanted)
        .map_err(io_error("registering the region with userfaultfd"))
}

/// Whether write-protect may track this pager's dirty bits, or why not.
fn wants_write_protect(config: &PagerConfig) -> Result<(), &'static str> {
    if !config.write_protect {
        return Err("off in the pager's configuration");
    }
    if config.serve == Serve::FaultingThread {
        // There every fault raises SIGBUS in the faulting thread, a
        // write-protect fault too.
        return Err("faults are served on the faulting thread (serve=faulting-thread)");
    }
    Ok(())
}

/// Start the thread that serves faults (the handler thread), or with
/// `serve` the faulting thread, the thread that serves what a signal
/// handler cannot (and register the pager with the SIGBUS handler). The
/// thread returns the service times it measured.
fn spawn_handler(
    handler: Handler,
    serve: Serve,
    cpu: Option<usize>,
    stop: &Arc<AtomicBool>,
    len: u64,
) -> Result<
    (
        JoinHandle<ServiceTimes>,
        Option<faulting_thread::Registration>,
    ),
    PagerError,
> {
    let stop = stop.clone();
    let pin = move || {
        if let Some(cpu) = cpu {
            // Best effort: an unpinned handler still serves.
            let _ = osprobe_core::affinity::pin_current_thread(cpu);
        }
    };
    let builder = std::thread::Builder::new().name("osprobe-pager".into());
    let spawned = match serve {
        Serve::HandlerThread => builder.spawn(move || {
            pin();
            let mut handler = handler;
            handler.serve(&stop);
            handler.times
        }),
        Serve::FaultingThread => {
            let start = handler.app_base;
            let shared = Arc::new(faulting_thread::Shared::new(handler, start, len)?);
            let registration = faulting_thread::register(&shared)?;
            let thread = builder
                .spawn(move || {
                    pin();
                    shared.serve_handed_over(&stop);
                    shared.with_handler(|h| std::mem::take(&mut h.times))
                })
                .map_err(io_error("starting the pager's thread"))?;
            return Ok((thread, Some(registration)));
        }
    };
    let thread = spawned.map_err(io_error("starting the handler thread"))?;
    Ok((thread, None))
}

/// The configuration's sizes, checked; the region's length in bytes.
fn check_config(config: &PagerConfig, page_size: usize) -> Result<usize, PagerError> {
    if config.frames == 0 {
        return Err(PagerError::Config("frames must be at least 1".into()));
    }
    if config.pages == 0 {
        return Err(PagerError::Config("pages must be at least 1".into()));
    }
    for (name, value) in [
        ("read-around", config.read_around),
        ("eviction batch", config.evict_batch),
    ] {
        if value == 0 || value > config.frames {
            return Err(PagerError::Config(format!(
                "{name} of {value} pages: expected 1 to the {} frames",
                config.frames
            )));
        }
    }
    let len = (config.pages as usize)
        .checked_mul(page_size)
        .filter(|l| *l <= 1 << 40)
        .ok_or_else(|| PagerError::Config(format!("{} pages is too many", config.pages)))?;
    Ok(len)
}

/// The page table: the read-only regions (write-protected in the
/// application's mapping `app`) and the writable "data" around them.
fn page_table(
    config: &PagerConfig,
    app: &Mapping,
    page_size: usize,
) -> Result<PageTable, PagerError> {
    let mut table = PageTable::new(config.pages);
    let mut first_writable = 0;
    let mut read_only = config.read_only.clone();
    read_only.sort_by_key(|r| r.1);
    for (name, first_page, pages) in &read_only {
        if *first_page > first_writable {
            table.add_region(Region {
                name: "data".into(),
                first_page: first_writable,
                pages: first_page - first_writable,
                writable: true,
            })?;
        }
        table.add_region(Region {
            name: name.clone(),
            first_page: *first_page,
            pages: *pages,
            writable: false,
        })?;
        // The MMU enforces it: a write is a segmentation fault
        // before it ever reaches the handler.
        // SAFETY: a range inside our own mapping (checked by add_region).
        let rc = unsafe {
            libc::mprotect(
                app.addr.add(*first_page as usize * page_size).cast(),
                *pages as usize * page_size,
                libc::PROT_READ,
            )
        };
        if rc != 0 {
            return Err(io_error(format!("protecting region '{name}'"))(
                io::Error::last_os_error(),
            ));
        }
        first_writable = first_page + pages;
    }
    if first_writable < config.pages {
        table.add_region(Region {
            name: "data".into(),
            first_page: first_writable,
            pages: config.pages - first_writable,
            writable: true,
        })?;
    }
    Ok(table)
}

/// The swap backend, checked on the way back ([`Verified`]), and with
/// read-around on, the thread that reads the next run ahead on the same
/// backend.
fn swap_with_ahead(
    backend: Box<dyn SwapBackend>,
    page_size: usize,
    read_around: usize,
    handler_cpu: Option<usize>,
) -> Result<(Verified, Option<Prefetcher>), PagerError> {
    if read_around <= 1 {
        return Ok((Verified::new(backend), None));
    }
    let shared = SharedSwap::new(backend);
    let ahead = Prefetcher::start(shared.clone(), page_size, read_around, handler_cpu)
        .map_err(io_error("starting the swap read-ahead thread"))?;
    Ok((Verified::new(Box::new(shared)), Some(ahead)))
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

pub(crate) fn memfd(len: usize) -> Result<OwnedFd, PagerError> {
    // SAFETY: a NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(c"osprobe-pager".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io_error("memfd_create")(io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(io_error("sizing the memfd")(io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Everything the handler thread owns.
struct Handler {
    uffd: Userfaultfd,
    memfd: OwnedFd,
    app_base: u64,
    own: Mapping,
    page_size: usize,
    table: PageTable,
    frames: FrameTable,
    swap_map: SwapMap,
    swap: Verified,
    /// Reads the next run of a sequential swap-in ahead (read-around on).
    ahead: Option<Prefetcher>,
    policy: Box<dyn Policy>,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    times: ServiceTimes,
    buffer: PageBuffer,
    zero_hash: u128,
    spin: Duration,
    read_around: usize,
    evict_batch: usize,
    /// The page after the last swap-in's (and its read-around's): a fault
    /// there is a sequential scan, which read-around serves.
    next_sequential: Option<u64>,
    /// Pages swapped in are mapped write-protected ([`DirtyTracking`]).
    write_protect: bool,
    /// UFFDIO_CONTINUE can keep a page write-protected (until the kernel
    /// says it cannot).
    continue_protected: bool,
    /// The fault being served is a write.
    write_fault: bool,
}

/// The referenced bits as the policy sees them: clearing one drops the
/// application's mapping of the page.
struct LiveBits<'a> {
    frames: &'a mut FrameTable,
    app_base: u64,
    page_size: usize,
    counters: &'a Counters,
}

impl ReferenceBits for LiveBits<'_> {
    fn test_and_clear(&mut self, frame: FrameId) -> bool {
        let Some(f) = self.frames.get_mut(frame) else {
            return false;
        };
        if !f.referenced {
            return false;
        }
        f.referenced = false;
        let addr = self.app_base + f.page * self.page_size as u64;
        drop_mapping(addr, self.page_size);
        bump(&self.counters.bits_cleared, 1);
        true
    }
}

/// Sorted page numbers as runs of consecutive pages: (first, count).
fn page_runs(sorted: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &page in sorted {
        match runs.last_mut() {
            Some((first, count)) if *first + *count == page => *count += 1,
            _ => runs.push((page, 1)),
        }
    }
    runs
}

/// Drop the application's page-table entries for pages from `addr` on
/// (the pages stay in the memfd's page cache).
fn drop_mapping(addr: u64, len: usize) {
    // SAFETY: a page of the registered mapping; MADV_DONTNEED on a shared
    // mapping only unmaps.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
}

/// A page on its way out: its frame, its state once out, and the slot
/// and hash it is written with if it changed.
struct Leaving {
    frame: FrameId,
    page: u64,
    new_state: PageState,
    write: Option<(u64, u128)>,
}

/// How one fault was served, for the counters and service times.
enum Served {
    ZeroFill,
    SwapIn {
        eviction_ns: Option<f64>,
    },
    ReferencedBit,
    /// A first write to a page mapped write-protected.
    DirtyBit,
    Duplicate,
}

impl Handler {
    fn serve(&mut self, stop: &AtomicBool) {
        let mut faults: Vec<Fault> = Vec::with_capacity(16);
        let mut idle_since: Option<Instant> = None;
        loop {
            if let Err(e) = self.uffd.read_faults(&mut faults) {
                self.log(format!("reading faults from userfaultfd: {e}"));
                std::thread::sleep(Duration::from_millis(10));
            }
            if faults.is_empty() {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() < self.spin {
                    std::hint::spin_loop();
                } else {
                    self.wait_readable(Duration::from_millis(20));
                }
                continue;
            }
            idle_since = None;
            for fault in faults.iter().copied() {
                let started = Instant::now();
                match self.serve_fault(fault) {
                    Ok(served) => self.account(served, started),
                    Err(reason) => self.fail(fault, &reason.to_string()),
                }
            }
        }
    }

    /// Wait up to `timeout` for a fault; the caller reads whatever is there
    /// (nothing on a timeout, a signal or an error) and looks at its stop flag.
    fn wait_readable(&self, timeout: Duration) {
        let _ = osprobe_core::sys::poll_one(self.uffd.raw(), libc::POLLIN, timeout);
    }

    /// Count a fault before the ioctl that wakes its thread: once awake,
    /// the application may read the counters and must find it there.
    fn count(&self, served: &Served) {
        let c = &self.counters;
        match served {
            Served::ZeroFill => bump(&c.zero_fills, 1),
            Served::SwapIn { .. } => {
                bump(&c.swap_ins, 1);
                bump(&c.bytes_in, self.page_size as u64);
            }
            Served::ReferencedBit => bump(&c.referenced_bit_faults, 1),
            Served::DirtyBit => {
                bump(&c.dirty_bit_faults, 1);
                return;
            }
            Served::Duplicate => {
                bump(&c.duplicate_faults, 1);
                return;
            }
        }
        bump(&c.faults, 1);
    }

    /// Take back a count made before an ioctl that failed.
    fn uncount(&self, served: &Served) {
        let c = &self.counters;
        let down = |counter: &AtomicU64, by: u64| counter.fetch_sub(by, Ordering::Relaxed);
        match served {
            Served::ZeroFill => down(&c.zero_fills, 1),
            Served::SwapIn { .. } => {
                down(&c.bytes_in, self.page_size as u64);
                down(&c.swap_ins, 1)
            }
            Served::ReferencedBit => down(&c.referenced_bit_faults, 1),
            Served::DirtyBit => {
                down(&c.dirty_bit_faults, 1);
                return;
            }
            Served::Duplicate => return,
        };
        down(&c.faults, 1);
    }

    /// The service time, after the fact (the handler's own samples).
    fn account(&mut self, served: Served, started: Instant) {
        let ns = started.elapsed().as_nanos() as f64;
        match served {
            Served::ZeroFill => record(&mut self.times.zero_fill, ns),
            Served::SwapIn { eviction_ns } => {
                record(&mut self.times.swap_in, ns);
                if let Some(e) = eviction_ns {
                    record(&mut self.times.eviction, e);
                }
            }
            Served::ReferencedBit => record(&mut self.times.referenced_bit, ns),
            Served::DirtyBit | Served::Duplicate => {}
        }
    }

    fn page_addr(&self, page: u64) -> u64 {
        self.app_base + page * self.page_size as u64
    }

    fn serve_fault(&mut self, fault: Fault) -> Result<Served, FaultError> {
        let page_bytes = self.page_size as u64;
        let offset = fault.address.wrapping_sub(self.app_base);
        let page = offset / page_bytes;
        let region = self
            .table
            .region_of(page)
            .ok_or(FaultError::OutsideRegions(fault.address))?;
        if fault.flags & PAGEFAULT_FLAG_WRITE != 0 && !region.writable {
            return Err(FaultError::ReadOnly {
                page,
                region: region.name.clone(),
            });
        }
        self.write_fault = fault.flags & PAGEFAULT_FLAG_WRITE != 0;
        if fault.flags & PAGEFAULT_FLAG_WP != 0 {
            if let PageState::Resident(frame) = self.table.get(page).state {
                return self.first_write(page, frame);
            }
            // Evicted meanwhile: served as the fault on a missing page it now is.
        }
        let addr = self.page_addr(page);
        match self.table.get(page).state {
            PageState::Resident(frame) => self.serve_resident(page, frame),
            PageState::Untouched => {
                let (frame, _) = self.obtain_frame()?;
                match self.zero_fill_into(page, frame) {
                    Ok(()) => Ok(Served::ZeroFill),
                    Err(e) => self.install_failed(page, addr, "UFFDIO_ZEROPAGE", e),
                }
            }
            PageState::Swapped(slot) => self.swap_in(page, slot),
        }
    }

    /// A fault on a resident page: its referenced bit was cleared (the
    /// mapping dropped), or another thread's fault on it was served first.
    /// Allocates nothing (the faulting-thread mode calls it in a signal
    /// handler).
    fn serve_resident(&mut self, page: u64, frame: FrameId) -> Result<Served, FaultError> {
        let addr = self.page_addr(page);
        let was_referenced = self.frames.get(frame).is_some_and(|f| f.referenced);
        self.count(&Served::ReferencedBit);
        match self.map_resident(frame, addr) {
            Ok(()) => {
                if let Some(f) = self.frames.get_mut(frame) {
                    f.referenced = true;
                }
                if !was_referenced {
                    self.policy.referenced(frame, page);
                }
                Ok(Served::ReferencedBit)
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                self.uncount(&Served::ReferencedBit);
                self.count(&Served::Duplicate);
                self.wake(addr)?;
                Ok(Served::Duplicate)
            }
            Err(e) => {
                self.uncount(&Served::ReferencedBit);
                Err(FaultError::Install {
                    ioctl: "UFFDIO_CONTINUE",
                    page,
                    source: e,
                })
            }
        }
    }

    /// Map a zero page for `page` in `frame`, counted before the ioctl
    /// that lets the application go on; on error the frame goes back and
    /// nothing stays counted. Allocates nothing once the page's leaf of
    /// the page table exists.
    fn zero_fill_into(&mut self, page: u64, frame: FrameId) -> io::Result<()> {
        self.count(&Served::ZeroFill);
        if let Err(e) = self
            .uffd
            .zeropage(self.page_addr(page), self.page_size as u64)
        {
            self.uncount(&Served::ZeroFill);
            self.frames.release(frame);
            return Err(e);
        }
        self.install(page, frame, self.zero_hash);
        Ok(())
    }

    /// Faulting-thread mode: allocate now what serving a fault in a
    /// signal handler touches (the policy's room for every frame, the
    /// service-time samples); page-table leaves are not: a first touch of
    /// a leaf goes to the pager's thread.
    fn prepare_for_signals(&mut self) {
        self.policy.reserve(self.frames.len());
        self.times = ServiceTimes::for_signals();
    }

    /// Faulting-thread mode, in the SIGBUS handler of the thread that
    /// touched `address`: serve a zero-fill into a free frame or a
    /// referenced-bit fault. False hands the fault to the pager's thread
    /// (an eviction, a swap-in, a new page-table leaf, anything that
    /// failed: that thread serves it or says why). No allocation, no
    /// lock, nothing but atomics and system calls.
    fn serve_in_signal(&mut self, address: u64) -> bool {
        let started = Instant::now();
        let page = address.wrapping_sub(self.app_base) / self.page_size as u64;
        if self.table.region_of(page).is_none() {
            return false;
        }
        let served = match self.table.get(page).state {
            PageState::Untouched if self.table.has_leaf(page) => {
                let Some(frame) = self.frames.take_free() else {
                    return false;
                };
                if self.zero_fill_into(page, frame).is_err() {
                    return false;
                }
                Served::ZeroFill
            }
            PageState::Resident(frame) => match self.serve_resident(page, frame) {
                Ok(served) => served,
                Err(_) => return false,
            },
            _ => return false,
        };
        self.account(served, started);
        true
    }

    /// Faulting-thread mode, on the pager's thread: a fault the faulting
    /// thread handed over. False: it could not be served (logged); the
    /// faulting thread's SIGBUS then goes on as a bus error. Writes to a
    /// read-only region never get here: the MMU refuses them first.
    fn serve_handed_over(&mut self, address: u64) -> bool {
        let fault = Fault {
            address,
            flags: 0,
            thread: 0,
        };
        let started = Instant::now();
        match self.serve_fault(fault) {
            Ok(served) => {
                self.account(served, started);
                true
            }
            Err(reason) => {
                self.note_failure(fault, &reason.to_string());
                false
            }
        }
    }

    /// A swap-in: from the run read ahead when the fault goes on with a
    /// sequential scan and that run starts at its slot; else a
    /// read-around (sequential) or the page alone. A read-around starts
    /// the next run's read ahead.
    fn swap_in(&mut self, page: u64, slot: u64) -> Result<Served, FaultError> {
        let page_bytes = self.page_size as u64;
        let addr = self.page_addr(page);
        let (frame, eviction_ns) = self.obtain_frame()?;
        let sequential = self.next_sequential == Some(page);
        if sequential {
            if let Some(served) = self.swap_in_ahead(page, slot, frame, eviction_ns) {
                return Ok(served);
            }
        }
        let mut frames = vec![frame];
        if sequential {
            for _ in 0..self.read_around_run(page, slot) {
                // Best effort: a frame that cannot be had (a victim
                // that cannot be saved) only shortens the read.
                match self.obtain_frame() {
                    Ok((f, _)) => frames.push(f),
                    Err(_) => break,
                }
            }
        }
        if frames.len() > 1 {
            if let Some(served) = self.swap_in_run(page, slot, &frames, eviction_ns) {
                if let Some(next) = self.next_sequential {
                    self.read_ahead_from(next);
                }
                return Ok(served);
            }
            // The run failed: the faulting page alone, as usual.
            for f in frames.drain(1..) {
                self.frames.release(f);
            }
        }
        let read = self.swap.read_page(slot, self.buffer.bytes(self.page_size));
        if let Err(e) = read {
            // Nothing installed yet: the frame goes back unused.
            self.frames.release(frame);
            return Err(FaultError::SwapIn { page, source: e });
        }
        // Checked against this hash by the read: no need to hash again.
        let hash = self.swap.written_hash(slot).unwrap_or(0);
        let served = Served::SwapIn { eviction_ns };
        self.count(&served);
        // A write would fault again at once on a protected page: it is
        // mapped writable, and dirty.
        let protect = self.write_protect && !self.write_fault;
        let (_, copied) = self.copy_in(addr, self.buffer.ptr(), page_bytes, protect);
        if let Err(e) = copied {
            self.uncount(&served);
            self.frames.release(frame);
            return self.install_failed(page, addr, "UFFDIO_COPY", e);
        }
        self.install(page, frame, hash);
        self.mark_clean(frame, protect);
        self.next_sequential = Some(page + 1);
        Ok(served)
    }

    /// Serve a sequential fault from the run read ahead, when it starts
    /// at `slot` and came back intact: the next run's read starts at
    /// once, then the pages still swapped to the slots read are mapped.
    /// None (the frame still the caller's) when there is no such run.
    fn swap_in_ahead(
        &mut self,
        page: u64,
        slot: u64,
        frame: FrameId,
        eviction_ns: Option<f64>,
    ) -> Option<Served> {
        let Fetched {
            pages,
            buffer,
            hashes,
            ..
        } = self.ahead.as_mut()?.take(slot)?;
        // A fault served meanwhile may have brought some of them in.
        let count = (1 + self.read_around_run(page, slot)).min(pages);
        let intact = hashes
            .as_ref()
            .is_ok_and(|h| self.swap.check_hashes(slot, &h[..count]).is_ok());
        if !intact {
            // The ordinary read says what is wrong, if it still is.
            self.give_back(buffer);
            return None;
        }
        self.read_ahead_from(page + count as u64);
        let mut frames = vec![frame];
        while frames.len() < count {
            match self.obtain_frame() {
                Ok((f, _)) => frames.push(f),
                Err(_) => break,
            }
        }
        let served = self.map_run(page, slot, &frames, buffer.ptr(), eviction_ns);
        if let Some(next) = self
            .next_sequential
            .filter(|_| matches!(served, Served::SwapIn { .. }))
        {
            bump(&self.counters.read_ahead_pages, next.saturating_sub(page));
        }
        self.give_back(buffer);
        Some(served)
    }

    /// Ask for the run that starts at `page` to be read ahead, if the page
    /// is in swap.
    fn read_ahead_from(&mut self, page: u64) {
        if self.ahead.is_none() || self.table.region_of(page).is_none() {
            return;
        }
        let PageState::Swapped(slot) = self.table.get(page).state else {
            return;
        };
        let run = 1 + self.read_around_run(page, slot);
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.ask(slot, run);
        }
    }

    fn give_back(&mut self, buffer: PageBuffer) {
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.give_back(buffer);
        }
    }

    /// How many pages after `page` (swapped to `slot`) a read-around may
    /// bring along: those in the same region, swapped out to the slots
    /// that follow, up to the read-around size.
    fn read_around_run(&self, page: u64, slot: u64) -> usize {
        let Some(region) = self.table.region_of(page) else {
            return 0;
        };
        let end = region.first_page + region.pages;
        let mut run = 0;
        while run + 1 < self.read_around {
            let next = page + 1 + run as u64;
            if next >= end
                || self.table.get(next).state != PageState::Swapped(slot + 1 + run as u64)
            {
                break;
            }
            run += 1;
        }
        run
    }

    /// Read `frames.len()` pages from `slot` on with one backend read and
    /// map them from `page` on ([`Handler::map_run`]). None when the read
    /// failed (nothing installed; the caller serves the page alone and
    /// the frames are still the caller's).
    fn swap_in_run(
        &mut self,
        page: u64,
        slot: u64,
        frames: &[FrameId],
        eviction_ns: Option<f64>,
    ) -> Option<Served> {
        let count = frames.len();
        let len = count * self.page_size;
        if self
            .swap
            .read_pages(slot, self.buffer.bytes(len), self.page_size)
            .is_err()
        {
            return None;
        }
        let src = self.buffer.ptr();
        Some(self.map_run(page, slot, frames, src, eviction_ns))
    }

    /// Map `frames.len()` pages read from `slot` on (at `src`, checked)
    /// from `page` on with one UFFDIO_COPY, into those frames; the frames
    /// of pages not mapped go back.
    fn map_run(
        &mut self,
        page: u64,
        slot: u64,
        frames: &[FrameId],
        src: *const u8,
        eviction_ns: Option<f64>,
    ) -> Served {
        let count = frames.len();
        let len = count * self.page_size;
        let served = Served::SwapIn { eviction_ns };
        self.count(&served);
        let addr = self.page_addr(page);
        // Protected, the faulting page too: a write to it costs one fault
        // more per run, not per page.
        let (copied, result) = self.copy_in(addr, src, len as u64, self.write_protect);
        // Pages the kernel stopped before go back; it stops only at a page
        // already present, which the eviction order rules out.
        let installed = (copied as usize / self.page_size).min(count);
        if installed == 0 {
            self.uncount(&served);
            for f in frames {
                self.frames.release(*f);
            }
            let e = result
                .err()
                .unwrap_or_else(|| io::Error::other("nothing copied"));
            return self
                .install_failed(page, addr, "UFFDIO_COPY", e)
                .unwrap_or(Served::Duplicate);
        }
        for (i, frame) in frames.iter().enumerate() {
            if i >= installed {
                self.frames.release(*frame);
                continue;
            }
            // Checked against this hash by the read.
            let hash = self.swap.written_hash(slot + i as u64).unwrap_or(0);
            self.install(page + i as u64, *frame, hash);
            self.mark_clean(*frame, self.write_protect);
        }
        let extra = (installed - 1) as u64;
        bump(&self.counters.read_around_pages, extra);
        bump(&self.counters.bytes_in, extra * self.page_size as u64);
        if let Err(e) = result {
            self.log(format!(
                "read-around from page {page}: UFFDIO_COPY stopped after {installed} of {count} pages: {e}"
            ));
        }
        self.next_sequential = Some(page + installed as u64);
        served
    }

    /// EEXIST from ZEROPAGE/COPY means the page table and the page cache
    /// disagree, which the eviction order rules out; wake the thread (it
    /// sees whatever is mapped) and report it rather than hide it.
    fn install_failed(
        &mut self,
        page: u64,
        addr: u64,
        what: &'static str,
        e: io::Error,
    ) -> Result<Served, FaultError> {
        if e.raw_os_error() == Some(libc::EEXIST) {
            self.wake(addr)?;
            self.log(format!(
                "{what} of page {page}: already present (pager state out of step)"
            ));
            return Ok(Served::Duplicate);
        }
        Err(FaultError::Install {
            ioctl: what,
            page,
            source: e,
        })
    }

    fn install(&mut self, page: u64, frame: FrameId, hash: u128) {
        self.frames.fill(
            frame,
            Frame {
                page,
                referenced: true,
                loaded_hash: hash,
                clean: false,
            },
        );
        self.table.entry(page).state = PageState::Resident(frame);
        self.policy.loaded(frame, page);
    }

    /// A frame just filled by a copy that mapped it write-protected
    /// (`protected`): known clean until its first write.
    fn mark_clean(&mut self, frame: FrameId, protected: bool) {
        if let Some(f) = self.frames.get_mut(frame) {
            f.clean = protected;
        }
    }

    /// UFFDIO_COPY of `len` bytes from `src` to `addr`, the pages mapped
    /// write-protected when `protect`; with the bytes copied.
    fn copy_in(&self, addr: u64, src: *const u8, len: u64, protect: bool) -> (u64, io::Result<()>) {
        if protect {
            self.uffd.copy_pages_protected(addr, src, len)
        } else {
            self.uffd.copy_pages(addr, src, len)
        }
    }

    /// Map the resident page in `frame` again (its referenced bit was
    /// cleared): a clean page stays write-protected, unless this is a
    /// write (it would fault at once) or the kernel cannot (it is then
    /// mapped writable and no longer known clean).
    fn map_resident(&mut self, frame: FrameId, addr: u64) -> io::Result<()> {
        let page_bytes = self.page_size as u64;
        let clean = self.frames.get(frame).is_some_and(|f| f.clean);
        if clean && !self.write_fault && self.continue_protected {
            match self.uffd.continue_protected(addr, page_bytes) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.continue_protected = false;
                    self.log(format!(
                        "UFFDIO_CONTINUE cannot keep a page write-protected here ({e}): pages mapped again count as changed"
                    ));
                }
                done => return done,
            }
        }
        // Cleared before the ioctl wakes the application: it may write.
        self.mark_clean(frame, false);
        self.uffd.continue_(addr, page_bytes)
    }

    /// A first write to the page in `frame`, mapped write-protected: it
    /// is changed from now on; let the write go on.
    fn first_write(&mut self, page: u64, frame: FrameId) -> Result<Served, FaultError> {
        // Cleared before the ioctl wakes the writer.
        self.mark_clean(frame, false);
        self.count(&Served::DirtyBit);
        let page_bytes = self.page_size as u64;
        if let Err(e) = self.uffd.write_unprotect(self.page_addr(page), page_bytes) {
            self.uncount(&Served::DirtyBit);
            return Err(FaultError::Install {
                ioctl: "UFFDIO_WRITEPROTECT",
                page,
                source: e,
            });
        }
        Ok(Served::DirtyBit)
    }

    fn wake(&self, addr: u64) -> Result<(), FaultError> {
        self.uffd
            .wake(addr, self.page_size as u64)
            .map_err(FaultError::Wake)
    }

    /// A free frame, evicting the policy's victim when none is; with the
    /// time the eviction took.
    fn obtain_frame(&mut self) -> Result<(FrameId, Option<f64>), FaultError> {
        if let Some(frame) = self.frames.take_free() {
            return Ok((frame, None));
        }
        let started = Instant::now();
        let mut victims: Vec<FrameId> = Vec::with_capacity(self.evict_batch);
        // A clock hand may pass frames emptied for the fault being served
        // (a read-around's); it finds an occupied one within two turns.
        let mut offers = 0;
        while victims.len() < self.evict_batch {
            let mut bits = LiveBits {
                frames: &mut self.frames,
                app_base: self.app_base,
                page_size: self.page_size,
                counters: &self.counters,
            };
            let victim = self.policy.victim(&mut bits);
            offers += 1;
            if self.frames.get(victim).is_some() && !victims.contains(&victim) {
                victims.push(victim);
                self.policy.vacated(victim);
            } else if !victims.is_empty() || offers > 2 * self.frames.len() {
                // The batch ends at the first frame the policy offers
                // that cannot go; the first victim must exist.
                break;
            }
        }
        if victims.is_empty() {
            return Err(FaultError::NoVictim);
        }
        if let Err(e) = self.evict(&victims) {
            // The pages stay; the policy must know they are still there.
            for &victim in &victims {
                if let Some(f) = self.frames.get(victim) {
                    self.policy.loaded(victim, f.page);
                }
            }
            return Err(e);
        }
        // The first frame is the caller's; the others wait on the free list.
        for &victim in &victims[1..] {
            self.frames.release(victim);
        }
        Ok((victims[0], Some(started.elapsed().as_nanos() as f64)))
    }

    /// Take the pages in `victims` away from the application, save those
    /// that changed (in one batch: write-behind, over rfs a window of
    /// writes in flight) and empty their frames (not yet free: the caller
    /// decides). On error the pages that were not removed stay resident
    /// and intact (their mappings are restored by the next fault on them);
    /// frames already emptied go back to the free list.
    fn evict(&mut self, victims: &[FrameId]) -> Result<(), FaultError> {
        let resident = self.take_away(victims)?;
        let mut leaving = Vec::with_capacity(resident.len());
        for (frame, f) in resident {
            leaving.push(self.leaving(frame, f)?);
        }
        self.write_behind(&leaving)?;
        self.punch_out(leaving)
    }

    /// The pages in `victims`, taken away from the application first (one
    /// madvise per run of consecutive pages): from here on it cannot
    /// change them.
    fn take_away(&mut self, victims: &[FrameId]) -> Result<Vec<(FrameId, Frame)>, FaultError> {
        let mut resident = Vec::with_capacity(victims.len());
        for &frame in victims {
            let Some(f) = self.frames.get(frame).copied() else {
                return Err(FaultError::EmptyFrame(frame));
            };
            resident.push((frame, f));
        }
        // A clean page is mapped write-protected: a write waits in a fault
        // until the eviction is over, as if unmapped; the punch unmaps it.
        let mut mapped: Vec<u64> = resident
            .iter()
            .filter(|(_, f)| f.referenced && !f.clean)
            .map(|(_, f)| f.page)
            .collect();
        mapped.sort_unstable();
        for (first, count) in page_runs(&mapped) {
            drop_mapping(self.page_addr(first), count as usize * self.page_size);
        }
        Ok(resident)
    }

    /// Where the page in `frame` goes: hashed, a changed page gets its
    /// slot (allocated on its first write) and is to be written there.
    fn leaving(&mut self, frame: FrameId, f: Frame) -> Result<Leaving, FaultError> {
        if let Some(f) = self.frames.get_mut(frame) {
            f.referenced = false;
        }
        let page = f.page;
        let entry = *self.table.entry(page);
        if let (true, Some(slot)) = (f.clean, entry.slot) {
            // Unchanged since it was read from this slot: nothing to hash
            // or write.
            bump(&self.counters.clean_drops, 1);
            return Ok(Leaving {
                frame,
                page,
                new_state: PageState::Swapped(slot),
                write: None,
            });
        }
        let hash = xxhash_rust::xxh3::xxh3_128(self.own_page(page));
        let (new_state, write) = if hash != f.loaded_hash {
            let slot = match entry.slot {
                Some(slot) => slot,
                None => self.swap_map.allocate().ok_or_else(|| SwapError::Full {
                    slots: self.swap_map.capacity(),
                    bytes: self.swap_map.capacity() * self.page_size as u64,
                })?,
            };
            self.table.entry(page).slot = Some(slot);
            (PageState::Swapped(slot), Some((slot, hash)))
        } else {
            match entry.slot {
                Some(slot) => (PageState::Swapped(slot), None),
                // Loaded as zeros and still zeros.
                None => (PageState::Untouched, None),
            }
        };
        Ok(Leaving {
            frame,
            page,
            new_state,
            write,
        })
    }

    /// Write the changed pages of `leaving` in one batch.
    fn write_behind(&mut self, leaving: &[Leaving]) -> Result<(), FaultError> {
        let (own, page_size) = (&self.own, self.page_size);
        let (writes, hashes): (Vec<(u64, &[u8])>, Vec<u128>) = leaving
            .iter()
            .filter_map(|l| {
                l.write
                    .map(|(slot, hash)| ((slot, own.page(l.page, page_size)), hash))
            })
            .unzip();
        if writes.is_empty() {
            return Ok(());
        }
        // A run read ahead that covers a slot written now would bring
        // back what it held before.
        if let Some(ahead) = self.ahead.as_mut() {
            for (slot, _) in &writes {
                ahead.written(*slot);
            }
        }
        let first = leaving.iter().find(|l| l.write.is_some()).map(|l| l.page);
        if let Err(e) = self.swap.write_pages_hashed(&writes, &hashes) {
            return Err(FaultError::WriteBack {
                count: writes.len(),
                first: first.unwrap_or(0),
                source: e,
            });
        }
        bump(&self.counters.write_backs, writes.len() as u64);
        bump(
            &self.counters.bytes_out,
            (writes.len() * self.page_size) as u64,
        );
        Ok(())
    }

    /// Only now may the pages leave memory: one hole per run. On error
    /// the frames already emptied go back to the free list.
    fn punch_out(&mut self, mut leaving: Vec<Leaving>) -> Result<(), FaultError> {
        leaving.sort_unstable_by_key(|l| l.page);
        let pages: Vec<u64> = leaving.iter().map(|l| l.page).collect();
        let mut done = 0;
        for (first, count) in page_runs(&pages) {
            // SAFETY: punching a hole in our own memfd.
            let rc = unsafe {
                libc::fallocate(
                    self.memfd.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    (first as usize * self.page_size) as libc::off_t,
                    (count as usize * self.page_size) as libc::off_t,
                )
            };
            if rc != 0 {
                let e = io::Error::last_os_error();
                for gone in &leaving[..done] {
                    self.frames.release(gone.frame);
                }
                return Err(FaultError::Punch {
                    page: first,
                    source: e,
                });
            }
            for l in &leaving[done..done + count as usize] {
                self.table.entry(l.page).state = l.new_state;
                self.frames.vacate(l.frame);
                bump(&self.counters.evictions, 1);
            }
            done += count as usize;
        }
        Ok(())
    }

    /// A resident page through the handler's own mapping.
    fn own_page(&self, page: u64) -> &[u8] {
        self.own.page(page, self.page_size)
    }

    /// Answer a fault that cannot be served with SIGBUS, and say why.
    fn fail(&mut self, fault: Fault, reason: &str) {
        self.note_failure(fault, reason);
        let page_start = fault.address & !(self.page_size as u64 - 1);
        if self.uffd.has_poison() && self.uffd.poison(page_start, self.page_size as u64).is_ok() {
            return;
        }
        if self.uffd.has_thread_id() && fault.thread != 0 {
            // SAFETY: signalling a thread of this process.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    fault.thread as libc::pid_t,
                    libc::SIGBUS,
                )
            };
        }
        let _ = self.uffd.wake(page_start, self.page_size as u64);
    }

    /// Count a fault that cannot be served and say why.
    fn note_failure(&mut self, fault: Fault, reason: &str) {
        bump(&self.counters.failures, 1);
        self.log(format!(
            "{reason}; the access at {:#x} gets SIGBUS",
            fault.address
        ));
    }

    fn log(&self, message: String) {
        eprintln!("osprobe pager: {message}");
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::page_runs;

    #[test]
    fn page_runs_join_consecutive_pages_only() {
        assert_eq!(page_runs(&[]), vec![]);
        assert_eq!(page_runs(&[4]), vec![(4, 1)]);
        assert_eq!(
            page_runs(&[1, 2, 3, 7, 9, 10]),
            vec![(1, 3), (7, 1), (9, 2)]
        );
    }
}
