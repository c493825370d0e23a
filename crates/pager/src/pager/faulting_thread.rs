//! Serving faults on the faulting thread (`serve=faulting-thread`).
//!
//! With UFFD_FEATURE_SIGBUS a fault in the region is not queued for the
//! handler thread: the kernel raises SIGBUS in the thread that faulted.
//! The SIGBUS handler here serves the fault on that thread
//! (UFFDIO_ZEROPAGE or UFFDIO_CONTINUE) and returns; the access is
//! retried and finds the page mapped. That saves the two context switches
//! of the handler-thread design (application to handler and back), most
//! of what a zero-fill costs beyond the kernel's own fault.
//!
//! A signal handler may not allocate, nor take a lock the interrupted
//! thread may hold. So:
//! - the pager's state sits behind a futex lock ([`SignalSafeLock`]) that
//!   only this SIGBUS handler (with every signal blocked) and the pager's
//!   own thread take, never code a signal could interrupt while it holds
//!   the lock, and nobody touches the region while holding it;
//! - what the in-signal path touches is allocated beforehand (page-table
//!   leaves, the policy's room for every frame, the service-time samples:
//!   `Handler::prepare_for_signals`);
//! - only a zero-fill into a free frame and a referenced-bit fault
//!   (UFFDIO_CONTINUE) are served in the signal handler. A fault that
//!   needs an eviction or I/O (a full frame table, a swap-in) or that
//!   fails is handed to the pager's thread through a preallocated request
//!   slot, the faulting thread waiting on a futex until it is served;
//! - a SIGBUS that is not a fault in a registered region (a genuine bus
//!   error), or one the pager could not serve, goes to the handler that
//!   was installed before ours, or ends the process as SIGBUS would.
//!
//! Where it applies: threads of the pager's own process only (a signal
//! handler runs in the process that faulted; another process's faults
//! would kill it). A system call that touches the region (a `read(2)`
//! into it, say) gets EFAULT instead of waiting for the page: the kernel
//! raises no signal for its own accesses.

use super::Handler;
use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which thread serves a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Serve {
    /// The pager's handler thread reads each fault from the userfaultfd
    /// and resolves it (any process, any access, system calls included).
    #[default]
    HandlerThread,
    /// The faulting thread itself, in a SIGBUS handler (threads of the
    /// pager's process only; see the module's documentation).
    FaultingThread,
}

impl Serve {
    /// The names, as parameters spell them.
    pub const NAMES: &'static [&'static str] = &["handler-thread", "faulting-thread"];

    pub fn name(self) -> &'static str {
        match self {
            Serve::HandlerThread => "handler-thread",
            Serve::FaultingThread => "faulting-thread",
        }
    }
}

impl Serve {
    /// Whether this mode can serve a workload run in `processes`
    /// processes of their own (not threads of the pager's process).
    pub fn check_processes(self, processes: usize) -> Result<(), NotThisProcess> {
        if self == Serve::FaultingThread && processes > 1 {
            return Err(NotThisProcess { processes });
        }
        Ok(())
    }
}

/// The faulting-thread mode asked for a workload in other processes.
#[derive(Debug, thiserror::Error)]
#[error(
    "serve=faulting-thread serves a fault in a SIGBUS handler of the thread that faulted, which must be a thread of the pager's own process; \
     processes={processes} runs the workload in {processes} processes of their own: use serve=handler-thread (the default)"
)]
pub struct NotThisProcess {
    pub processes: usize,
}

/// A serving mode's name that is not one.
#[derive(Debug, thiserror::Error)]
#[error("serve '{0}': expected handler-thread or faulting-thread")]
pub struct UnknownServe(pub String);

impl FromStr for Serve {
    type Err = UnknownServe;

    fn from_str(name: &str) -> Result<Serve, UnknownServe> {
        match name {
            "handler-thread" => Ok(Serve::HandlerThread),
            "faulting-thread" => Ok(Serve::FaultingThread),
            other => Err(UnknownServe(other.to_string())),
        }
    }
}

/// Why a pager could not serve its faults on the faulting thread.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("serve=faulting-thread: {max} pagers already serve faults on the faulting thread in this process (the SIGBUS handler's limit)")]
    TooMany { max: usize },
    #[error("serve=faulting-thread: installing the SIGBUS handler: {0}")]
    Sigaction(#[source] io::Error),
    #[error("serve=faulting-thread: the eventfd that faulting threads ring: {0}")]
    Doorbell(#[source] io::Error),
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: a futex on our own word; it returns at once when the word
    // no longer holds `expected` (and on a signal: callers loop).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: waking waiters on our own word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
}

/// A mutex made of one futex word (0 free, 1 held, 2 held with waiters):
/// nothing but atomics and the futex system call, so a signal handler may
/// take it. Deadlock-free here because its holders (the SIGBUS handler
/// with every signal blocked, the pager's thread) never wait, while
/// holding it, for a thread that waits for it.
struct SignalSafeLock {
    word: AtomicU32,
}

impl SignalSafeLock {
    const fn new() -> SignalSafeLock {
        SignalSafeLock {
            word: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> LockGuard<'_> {
        if self
            .word
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.word.swap(2, Ordering::Acquire) != 0 {
                futex_wait(&self.word, 2);
            }
        }
        LockGuard { lock: self }
    }
}

struct LockGuard<'a> {
    lock: &'a SignalSafeLock,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.lock.word.swap(0, Ordering::Release) == 2 {
            futex_wake(&self.lock.word, 1);
        }
    }
}

/// Request slots: at most this many faults handed to the pager's thread
/// at once (more wait for a slot).
const REQUESTS: usize = 64;
const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const PENDING: u32 = 2;
const SERVED: u32 = 3;
const FAILED: u32 = 4;

/// One fault handed to the pager's thread: the faulting thread claims it,
/// fills in the address, marks it pending and waits for served or failed.
struct Request {
    state: AtomicU32,
    address: AtomicU64,
}

/// The handler's state, shared by the faulting threads' SIGBUS handler
/// and the pager's thread.
pub(super) struct Shared {
    lock: SignalSafeLock,
    handler: UnsafeCell<Handler>,
    /// The application's mapping: [start, end).
    start: u64,
    end: u64,
    requests: [Request; REQUESTS],
    /// An eventfd a faulting thread writes after handing a fault over.
    doorbell: OwnedFd,
    /// The pager's thread has stopped: nobody serves requests any more.
    gone: AtomicBool,
}

// SAFETY: the handler is reached only through `with_handler`, under the
// lock; everything else is atomics or immutable.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl Shared {
    /// The handler's state, to be served from the faulting threads and the
    /// pager's thread; the region is `len` bytes from `start`.
    pub(super) fn new(mut handler: Handler, start: u64, len: u64) -> Result<Shared, SetupError> {
        handler.prepare_for_signals();
        // SAFETY: eventfd takes a count and flags.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(SetupError::Doorbell(io::Error::last_os_error()));
        }
        // SAFETY: a new descriptor we own.
        let doorbell = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Shared {
            lock: SignalSafeLock::new(),
            handler: UnsafeCell::new(handler),
            start,
            end: start + len,
            requests: std::array::from_fn(|_| Request {
                state: AtomicU32::new(FREE),
                address: AtomicU64::new(0),
            }),
            doorbell,
            gone: AtomicBool::new(false),
        })
    }

    pub(super) fn with_handler<R>(&self, f: impl FnOnce(&mut Handler) -> R) -> R {
        let _held = self.lock.lock();
        // SAFETY: the lock makes this the only reference.
        f(unsafe { &mut *self.handler.get() })
    }

    fn contains(&self, address: u64) -> bool {
        address >= self.start && address < self.end
    }

    /// In the SIGBUS handler: serve the fault at `address` here, or hand
    /// it to the pager's thread. Whether the access may be retried.
    fn serve_here(&self, address: u64) -> bool {
        if self.with_handler(|h| h.serve_in_signal(address)) {
            return true;
        }
        self.hand_over(address)
    }

    /// Hand the fault to the pager's thread and wait until it is served.
    fn hand_over(&self, address: u64) -> bool {
        let Some(request) = self.claim() else {
            return false;
        };
        request.address.store(address, Ordering::Relaxed);
        request.state.store(PENDING, Ordering::SeqCst);
        if self.gone.load(Ordering::SeqCst) {
            // The pager's thread stopped meanwhile (its sweep may have
            // missed this one).
            let _ =
                request
                    .state
                    .compare_exchange(PENDING, FAILED, Ordering::SeqCst, Ordering::SeqCst);
        }
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our eventfd (async-signal-safe).
        unsafe { libc::write(self.doorbell.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let mut state = request.state.load(Ordering::Acquire);
        while state == PENDING {
            futex_wait(&request.state, PENDING);
            state = request.state.load(Ordering::Acquire);
        }
        request.state.store(FREE, Ordering::Release);
        state == SERVED
    }

    /// A free request slot, waiting for one if all are in use; None once
    /// the pager's thread has stopped.
    fn claim(&self) -> Option<&Request> {
        loop {
            for request in &self.requests {
                if request
                    .state
                    .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(request);
                }
            }
            if self.gone.load(Ordering::SeqCst) {
                return None;
            }
            // SAFETY: no arguments; async-signal-safe.
            unsafe { libc::sched_yield() };
        }
    }

    /// The pager's thread: serve the faults handed over until `stop` (set
    /// once no faulting thread can reach this pager any more).
    pub(super) fn serve_handed_over(&self, stop: &AtomicBool) {
        let _gone = GoneOnExit(self);
        loop {
            let _ = osprobe_core::sys::poll_one(
                self.doorbell.as_raw_fd(),
                libc::POLLIN,
                Duration::from_millis(20),
            );
            let mut rung = 0u64;
            // SAFETY: an 8-byte read from our non-blocking eventfd: the
            // count is reset before the requests are looked at, so a ring
            // after this is seen by the next poll.
            unsafe { libc::read(self.doorbell.as_raw_fd(), (&mut rung as *mut u64).cast(), 8) };
            let mut served = 0;
            for request in &self.requests {
                if request.state.load(Ordering::Acquire) != PENDING {
                    continue;
                }
                let address = request.address.load(Ordering::Relaxed);
                let ok = self.with_handler(|h| h.serve_handed_over(address));
                request
                    .state
                    .store(if ok { SERVED } else { FAILED }, Ordering::Release);
                futex_wake(&request.state, i32::MAX);
                served += 1;
            }
            if served == 0 && stop.load(Ordering::Acquire) {
                return;
            }
        }
    }
}

/// Marks the pager's thread gone when it returns (or panics) and fails
/// the requests still pending, so that no faulting thread waits for ever.
struct GoneOnExit<'a>(&'a Shared);

impl Drop for GoneOnExit<'_> {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::SeqCst);
        for request in &self.0.requests {
            if request
                .state
                .compare_exchange(PENDING, FAILED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                futex_wake(&request.state, i32::MAX);
            }
        }
    }
}

/// Pagers in faulting-thread mode at once, per process.
const MAX_PAGERS: usize = 64;

/// One registered pager, as the SIGBUS handler finds it: the region's
/// bounds (a first look without touching the pager) and the pager, which
/// stays alive while `users` counts a handler using it.
struct Slot {
    shared: AtomicPtr<Shared>,
    start: AtomicU64,
    end: AtomicU64,
    users: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    shared: AtomicPtr::new(std::ptr::null_mut()),
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
    users: AtomicUsize::new(0),
};

static SLOTS: [Slot; MAX_PAGERS] = [EMPTY_SLOT; MAX_PAGERS];
/// Slots ever used (the handler looks at no more).
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);
/// Registering, deregistering and installing the handler: one at a time.
static REGISTRY: Mutex<()> = Mutex::new(());

/// The SIGBUS action that was in place before ours: a SIGBUS that is not
/// ours goes there.
struct Previous(UnsafeCell<libc::sigaction>);
// SAFETY: written only under REGISTRY before our handler is installed;
// read by the handler.
unsafe impl Sync for Previous {}
// SAFETY: all zeros is SIG_DFL with no flags.
static PREVIOUS: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// A pager registered with the SIGBUS handler; dropping it deregisters
/// (waiting for any handler still serving one of its faults).
pub(super) struct Registration {
    slot: usize,
}

/// Register `shared` with the SIGBUS handler, installing the handler if
/// it is not in place (again, if someone replaced it since).
pub(super) fn register(shared: &Arc<Shared>) -> Result<Registration, SetupError> {
    let _one = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    install_handler()?;
    for (index, slot) in SLOTS.iter().enumerate() {
        if !slot.shared.load(Ordering::SeqCst).is_null() {
            continue;
        }
        slot.start.store(shared.start, Ordering::SeqCst);
        slot.end.store(shared.end, Ordering::SeqCst);
        let raw = Arc::into_raw(shared.clone()).cast_mut();
        slot.shared.store(raw, Ordering::SeqCst);
        SLOTS_USED.fetch_max(index + 1, Ordering::SeqCst);
        return Ok(Registration { slot: index });
    }
    Err(SetupError::TooMany { max: MAX_PAGERS })
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _one = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &SLOTS[self.slot];
        let raw = slot.shared.swap(std::ptr::null_mut(), Ordering::SeqCst);
        // A handler that counted itself before the swap may still use it.
        while slot.users.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        slot.start.store(0, Ordering::SeqCst);
        slot.end.store(0, Ordering::SeqCst);
        if !raw.is_null() {
            // SAFETY: the reference `register` leaked; nobody uses it now.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }
}

fn install_handler() -> Result<(), SetupError> {
    let ours = on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
        as libc::sighandler_t;
    // SAFETY: reading the current action into a local.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) } != 0 {
        return Err(SetupError::Sigaction(io::Error::last_os_error()));
    }
    if current.sa_sigaction == ours {
        return Ok(());
    }
    // SAFETY: our handler is not installed, so nothing reads PREVIOUS now
    // (REGISTRY keeps other installers out).
    unsafe { *PREVIOUS.0.get() = current };
    // SAFETY: a zeroed action filled in: SA_SIGINFO for the address, every
    // signal blocked while it runs (no handler nests inside it).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = ours;
    action.sa_flags = libc::SA_SIGINFO;
    unsafe { libc::sigfillset(&mut action.sa_mask) };
    if unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) } != 0 {
        return Err(SetupError::Sigaction(io::Error::last_os_error()));
    }
    Ok(())
}

/// The SIGBUS handler: a fault in a registered region is served (or
/// handed over) and the access retried; anything else is chained.
extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel hands a valid siginfo; errno is this thread's
    // and must come back as the interrupted code left it.
    unsafe {
        let errno = *libc::__errno_location();
        let served = (*info).si_code == libc::BUS_ADRERR
            && serve_registered((*info).si_addr() as u64) == Some(true);
        if !served {
            chain(signal, info, context);
        }
        *libc::__errno_location() = errno;
    }
}

/// Serve a fault at `address` if a registered pager's region holds it:
/// Some(whether it was served), None when no pager's region does.
fn serve_registered(address: u64) -> Option<bool> {
    let used = SLOTS_USED.load(Ordering::SeqCst);
    for slot in SLOTS.iter().take(used) {
        let (start, end) = (
            slot.start.load(Ordering::Relaxed),
            slot.end.load(Ordering::Relaxed),
        );
        if address < start || address >= end {
            continue;
        }
        slot.users.fetch_add(1, Ordering::SeqCst);
        let raw = slot.shared.load(Ordering::SeqCst);
        // SAFETY: counted in `users` before loading: a pager still in the
        // slot now is not freed until we leave.
        let result = unsafe { raw.as_ref() }
            .filter(|shared| shared.contains(address))
            .map(|shared| shared.serve_here(address));
        slot.users.fetch_sub(1, Ordering::SeqCst);
        if result.is_some() {
            return result;
        }
    }
    None
}

/// A SIGBUS that is not ours (or that the pager could not serve) goes
/// where it would have gone without us: the previous handler, or the
/// default action (the process ends with SIGBUS).
///
/// # Safety
/// Called from the SIGBUS handler with the kernel's arguments.
unsafe fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = *PREVIOUS.0.get();
    let action = previous.sa_sigaction;
    if action == libc::SIG_DFL || action == libc::SIG_IGN {
        // The kernel forces the default action on a fault's SIGBUS even
        // when ignored; restore it. A fault recurs when the access is
        // retried; a SIGBUS sent by a process is sent again.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signal, &default, std::ptr::null_mut());
        if (*info).si_code <= 0 {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), signal);
        }
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            std::mem::transmute(action);
        handler(signal, info, context);
    } else {
        let handler: extern "C" fn(libc::c_int) = std::mem::transmute(action);
        handler(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_names_parse_back_and_others_are_refused() {
        for name in Serve::NAMES {
            assert_eq!(name.parse::<Serve>().unwrap().name(), *name);
        }
        let e = "signal".parse::<Serve>().unwrap_err().to_string();
        assert!(
            e.contains("'signal'") && e.contains("faulting-thread"),
            "{e}"
        );
    }

    #[test]
    fn the_faulting_thread_mode_is_refused_for_other_processes() {
        assert!(Serve::FaultingThread.check_processes(1).is_ok());
        assert!(Serve::HandlerThread.check_processes(4).is_ok());
        let e = Serve::FaultingThread
            .check_processes(4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("processes=4") && e.contains("use serve=handler-thread"),
            "{e}"
        );
    }

    #[test]
    fn the_lock_excludes_and_wakes_its_waiters() {
        let lock = Arc::new(SignalSafeLock::new());
        let count = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (lock, count) = (lock.clone(), count.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let _held = lock.lock();
                        // Not atomic as a whole: only the lock keeps it right.
                        let v = count.load(Ordering::Relaxed);
                        count.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 40_000);
        assert_eq!(lock.word.load(Ordering::Relaxed), 0);
    }
}
