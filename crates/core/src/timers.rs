//! The timer service of the SOS design document section 2, as a small reusable component:
//! register a callback to run after a delay (or at a moment), remove it
//! before it fires, at most a configured number pending at once, and
//! nanosecond time stamps on CLOCK_MONOTONIC. `time.timers` measures how
//! late its callbacks fire; the link emulator releases packets with its
//! non-threaded core.
//!
//! Two layers:
//!
//! - [`TimerQueue`]: the pending timers in order of deadline, with no
//!   thread and no clock of its own. A binary heap of (deadline, id) gives
//!   the earliest in O(1) and insertion in O(log n); the payloads live in a
//!   map by id, so that [`TimerQueue::remove`] is O(1) and simply leaves a
//!   stale heap entry behind. Stale entries are dropped when they reach the
//!   top, and the heap is rebuilt when they outnumber the live ones, so
//!   removal-heavy use does not grow it without bound. Equal deadlines fire
//!   in registration order (ids increase). A caller with its own loop (the
//!   link emulator) asks [`TimerQueue::next_deadline`], waits, and takes
//!   what [`TimerQueue::pop_due`] gives.
//! - [`TimerService`]: one thread that runs a `TimerQueue` of callbacks. It
//!   waits until the earliest deadline with a [`Strategy`] (by default the
//!   hybrid of [`Strategy::HYBRID_DEFAULT`]: block until 50 us before, spin
//!   the rest), then calls each due callback with a [`Fired`] record
//!   (due and actual time, so lateness = fired - due).
//!
//! Waking the service when an earlier timer arrives. While it waits for a
//! deadline, someone may register a timer due sooner; the thread must then
//! wait for the new deadline instead. The wait is a futex on a generation
//! counter, chosen over a condition variable or an eventfd because:
//!
//! - it waits with an *absolute* CLOCK_MONOTONIC deadline
//!   (FUTEX_WAIT_BITSET), the same high-resolution timer as
//!   clock_nanosleep(TIMER_ABSTIME), so the blocking part is as accurate as
//!   the best plain sleep and never drifts by the time spent computing an
//!   interval (a condition variable takes a relative timeout);
//! - checking for news costs one atomic load, not a system call, so the
//!   spinning end of the hybrid watches for earlier timers for free, and a
//!   registration never has to interrupt a spin;
//! - no lock is taken on the wake-up path: the service thread does not
//!   have to reacquire a mutex the registering thread may still hold (a
//!   condition variable's wake-up does, and the registrar would make the
//!   timer late); the registrar wakes the futex only after unlocking;
//! - no wake-up is lost: FUTEX_WAIT sleeps only if the counter still holds
//!   the value read together with the deadline, under the queue's lock;
//! - a registration wakes the thread only when the new timer is the
//!   earliest; later timers cost the service nothing.
//!
//! How each strategy waits here: Spin spins all the way (it blocks only
//! when no timer is pending); Hybrid { spin } blocks until `spin` before
//! the deadline and spins the rest; the kernel strategies (nanosleep,
//! clock_nanosleep, timerfd, epoll) all block until the deadline itself,
//! in the futex (the wait must be interruptible by registrations, which
//! their system calls are not). The service thread sets its own timer
//! slack to 1 ns: with the default 50 us the kernel may defer each futex
//! wake-up by as much as the hybrid's whole spin margin, and `time.sleep`
//! measured a normal thread's absolute sleeps 55 us late at the median on
//! a VM. What is left for the spin to absorb is the wake-up latency of the
//! scheduler (and, on a VM, of the host waking an idle vCPU).
//!
//! Callbacks run on the service thread, one after the other, outside the
//! queue's lock: a callback may register or remove timers. A slow callback
//! makes the following ones late; that is the lateness `time.timers`
//! reports. A callback that panics is contained and counted
//! ([`TimerService::panicked`]); the service goes on.

use crate::clock::monotonic_ns;
use crate::sleep::Strategy;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

/// A registered timer, unique within its queue or service (ids are never
/// reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

impl TimerId {
    /// The number behind the id (registration order).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "timer {}", self.0)
    }
}

/// Why a timer could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// As many timers as the maximum are pending.
    #[error("too many timers: at most {max} may be pending at once")]
    Full { max: usize },
}

/// A timer that is due, as [`TimerQueue::pop_due`] hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<T> {
    pub id: TimerId,
    /// Its deadline, CLOCK_MONOTONIC nanoseconds.
    pub due_ns: u64,
    pub payload: T,
}

/// Pending timers in order of deadline; no thread, no clock. See the
/// module documentation.
#[derive(Debug)]
pub struct TimerQueue<T> {
    /// (deadline, id), earliest first; may hold stale entries of removed
    /// timers, but never at the top.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// The live timers: id -> (deadline, payload).
    live: HashMap<u64, (u64, T)>,
    next_id: u64,
    max: usize,
}

impl<T> TimerQueue<T> {
    /// An empty queue holding at most `max` pending timers.
    pub fn new(max: usize) -> TimerQueue<T> {
        TimerQueue {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next_id: 0,
            max,
        }
    }

    /// The most timers that may be pending at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Add a timer due at `deadline_ns` (CLOCK_MONOTONIC nanoseconds; a
    /// past deadline is due at once).
    pub fn push(&mut self, deadline_ns: u64, payload: T) -> Result<TimerId, TimerError> {
        if self.live.len() >= self.max {
            return Err(TimerError::Full { max: self.max });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((deadline_ns, id)));
        self.live.insert(id, (deadline_ns, payload));
        Ok(TimerId(id))
    }

    /// Remove a pending timer and give back its payload; None if it is not
    /// pending (already popped, removed, or never existed).
    pub fn remove(&mut self, id: TimerId) -> Option<T> {
        let (_, payload) = self.live.remove(&id.0)?;
        self.drop_stale_top();
        // Rebuild once stale entries outnumber live ones: keeps the heap
        // within twice the live size (plus slack, so that a small queue is
        // not rebuilt on every removal).
        if self.heap.len() > 2 * self.live.len() + 64 {
            self.heap = self
                .live
                .iter()
                .map(|(&id, &(deadline, _))| Reverse((deadline, id)))
                .collect();
        }
        Some(payload)
    }

    /// The deadline of a pending timer.
    pub fn deadline_of(&self, id: TimerId) -> Option<u64> {
        self.live.get(&id.0).map(|&(deadline, _)| deadline)
    }

    /// The earliest deadline pending.
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((deadline, _))| *deadline)
    }

    /// The earliest timer if it is due at `now_ns` (deadline <= now);
    /// call repeatedly to take every due timer, earliest first.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Due<T>> {
        let &Reverse((deadline, id)) = self.heap.peek()?;
        if deadline > now_ns {
            return None;
        }
        self.heap.pop();
        // The top is never stale, so the id is live.
        let (due_ns, payload) = self.live.remove(&id)?;
        self.drop_stale_top();
        Some(Due {
            id: TimerId(id),
            due_ns,
            payload,
        })
    }

    /// Keep the invariant that the top of the heap is a live timer.
    fn drop_stale_top(&mut self) {
        while let Some(Reverse((_, id))) = self.heap.peek() {
            if self.live.contains_key(id) {
                return;
            }
            self.heap.pop();
        }
    }
}

/// When a timer is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// This long after registration.
    After(Duration),
    /// At this CLOCK_MONOTONIC time, in nanoseconds.
    At(u64),
}

impl When {
    /// The absolute deadline, for a registration at `now_ns`.
    pub fn deadline_ns(self, now_ns: u64) -> u64 {
        match self {
            When::After(delay) => {
                let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
                now_ns.saturating_add(delay)
            }
            When::At(deadline) => deadline,
        }
    }
}

impl From<Duration> for When {
    fn from(delay: Duration) -> When {
        When::After(delay)
    }
}

/// What a callback is told when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    pub id: TimerId,
    /// The deadline, CLOCK_MONOTONIC nanoseconds.
    pub due_ns: u64,
    /// When the callback was called (read just before the call).
    pub fired_ns: u64,
}

impl Fired {
    /// How late the callback ran: fired - due (never negative: a timer is
    /// only taken once its deadline has passed).
    pub fn lateness_ns(&self) -> u64 {
        self.fired_ns.saturating_sub(self.due_ns)
    }
}

/// What the service calls when a timer fires.
pub type Callback = Box<dyn FnOnce(Fired) + Send>;

/// A thread that runs callbacks at their deadlines. See the module
/// documentation. Dropping it is [`TimerService::shutdown`].
pub struct TimerService {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    thread_id: ThreadId,
}

struct Shared {
    state: Mutex<State>,
    /// The futex word: bumped whenever the service thread must look at the
    /// queue again (an earlier timer, a shutdown).
    generation: AtomicU32,
    strategy: Strategy,
    panicked: AtomicU64,
}

struct State {
    queue: TimerQueue<Callback>,
    stopping: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The lock is never held while user code runs, so a poisoned lock
        // can only come from an allocation failure; the state is still
        // consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tell the service thread to look at the queue again.
    fn notify(&self) {
        futex_wake(&self.generation);
    }
}

impl TimerService {
    /// A service for at most `max_timers` pending timers, waiting with
    /// [`Strategy::HYBRID_DEFAULT`].
    pub fn new(max_timers: usize) -> io::Result<TimerService> {
        TimerService::with_strategy(max_timers, Strategy::HYBRID_DEFAULT)
    }

    /// A service waiting with `strategy` (see the module documentation for
    /// what each strategy means here).
    pub fn with_strategy(max_timers: usize, strategy: Strategy) -> io::Result<TimerService> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: TimerQueue::new(max_timers),
                stopping: false,
            }),
            generation: AtomicU32::new(0),
            strategy,
            panicked: AtomicU64::new(0),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("osprobe-timers".into())
            .spawn(move || {
                set_own_timer_slack_to_minimum();
                service_loop(&for_thread)
            })?;
        let thread_id = thread.thread().id();
        Ok(TimerService {
            shared,
            thread: Some(thread),
            thread_id,
        })
    }

    /// Call `callback` once `when` has come. Fails when `max_timers` are
    /// pending.
    pub fn register<F>(&self, when: When, callback: F) -> Result<TimerId, TimerError>
    where
        F: FnOnce(Fired) + Send + 'static,
    {
        let deadline = when.deadline_ns(monotonic_ns());
        let (id, earliest) = {
            let mut state = self.shared.lock();
            let before = state.queue.next_deadline();
            let id = state.queue.push(deadline, Box::new(callback))?;
            let earliest = before.is_none_or(|b| deadline < b);
            if earliest {
                // Under the lock, so the service thread either sees the new
                // generation with the new deadline, or sleeps on the old
                // value and is woken below.
                self.shared.generation.fetch_add(1, Ordering::SeqCst);
            }
            (id, earliest)
        };
        if earliest {
            self.shared.notify();
        }
        Ok(id)
    }

    /// Cancel a pending timer: true if it was pending and will not fire;
    /// false if it has fired, is firing, was removed or never existed.
    pub fn remove(&self, id: TimerId) -> bool {
        // The callback is dropped after the lock is released (its drop is
        // user code). No wake-up: the service finds nothing due at the old
        // deadline and waits again.
        let removed = self.shared.lock().queue.remove(id);
        removed.is_some()
    }

    /// Timers registered and not yet fired or removed.
    pub fn pending(&self) -> usize {
        self.shared.lock().queue.len()
    }

    pub fn max_timers(&self) -> usize {
        self.shared.lock().queue.max()
    }

    pub fn strategy(&self) -> Strategy {
        self.shared.strategy
    }

    /// Callbacks that panicked (contained; the service went on).
    pub fn panicked(&self) -> u64 {
        self.shared.panicked.load(Ordering::Relaxed)
    }

    /// The clock the service runs on, CLOCK_MONOTONIC nanoseconds.
    pub fn now_ns() -> u64 {
        monotonic_ns()
    }

    /// Stop the thread and drop every pending callback without calling it.
    /// Waits for a callback that is running to return (unless called from
    /// a callback, which cannot wait for itself).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let pending = {
            let mut state = self.shared.lock();
            state.stopping = true;
            let max = state.queue.max();
            self.shared.generation.fetch_add(1, Ordering::SeqCst);
            std::mem::replace(&mut state.queue, TimerQueue::new(max))
        };
        self.shared.notify();
        drop(pending);
        if let Some(thread) = self.thread.take() {
            if std::thread::current().id() != self.thread_id {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for TimerService {
    fn drop(&mut self) {
        self.stop();
    }
}

impl fmt::Debug for TimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerService")
            .field("strategy", &self.shared.strategy)
            .field("pending", &self.pending())
            .finish()
    }
}

/// The service thread: take what is due, run it, wait for the next
/// deadline or for news.
fn service_loop(shared: &Shared) {
    let mut due: Vec<Due<Callback>> = Vec::new();
    loop {
        let (deadline, generation) = {
            let mut state = shared.lock();
            if state.stopping {
                return;
            }
            let now = monotonic_ns();
            while let Some(d) = state.queue.pop_due(now) {
                due.push(d);
            }
            (
                state.queue.next_deadline(),
                shared.generation.load(Ordering::SeqCst),
            )
        };
        if !due.is_empty() {
            for d in due.drain(..) {
                let fired = Fired {
                    id: d.id,
                    due_ns: d.due_ns,
                    fired_ns: monotonic_ns(),
                };
                let callback = d.payload;
                if catch_unwind(AssertUnwindSafe(move || callback(fired))).is_err() {
                    shared.panicked.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Firing took time: look again before waiting.
            continue;
        }
        wait(shared, deadline, generation);
    }
}

/// Wait until `deadline` (or forever without one), returning early when
/// the generation moves away from `generation`.
fn wait(shared: &Shared, deadline: Option<u64>, generation: u32) {
    let changed = || shared.generation.load(Ordering::SeqCst) != generation;
    let Some(deadline) = deadline else {
        // Nothing pending: sleep until a registration or a shutdown.
        while !changed() {
            futex_wait(&shared.generation, generation, None);
        }
        return;
    };
    let spin_ns = match shared.strategy {
        Strategy::Spin => u64::MAX,
        Strategy::Hybrid { spin } => u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX),
        Strategy::Nanosleep | Strategy::ClockNanosleepAbs | Strategy::Timerfd | Strategy::Epoll => {
            0
        }
    };
    let block_until = deadline.saturating_sub(spin_ns);
    // Loop: a futex wait also ends on a signal or a spurious wake-up.
    while monotonic_ns() < block_until {
        if changed() {
            return;
        }
        futex_wait(&shared.generation, generation, Some(block_until));
    }
    while monotonic_ns() < deadline {
        if changed() {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Sleep while `word` holds `expected`, until `deadline_ns` on
/// CLOCK_MONOTONIC (absolute) or until woken. Every outcome (timeout,
/// wake-up, value already changed, signal) just returns: the caller checks
/// what it waits for.
fn futex_wait(word: &AtomicU32, expected: u32, deadline_ns: Option<u64>) {
    let timeout = deadline_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as _, // the field's time_t (musl's libc deprecates the name)
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the whole call;
    // the timeout is null or points to a timespec that outlives the call.
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout; the
    // second address is unused by this operation.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            timeout_ptr,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        );
    }
}

/// Ask the kernel not to defer this thread's timed wake-ups. A normal
/// thread's timer slack (50 us by default) lets the kernel fire its timer
/// up to that much late to batch interrupts: more than the hybrid's spin
/// margin, so every timer would be late by the slack minus the margin.
/// The setting belongs to the calling thread only (the service thread).
fn set_own_timer_slack_to_minimum() {
    // SAFETY: PR_SET_TIMERSLACK takes a value, no pointer; 1 ns is the
    // smallest (0 would mean "the default").
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Wake the one thread that may sleep on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE only
    // uses its address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    /// Far enough that it never fires during a test.
    const FAR: Duration = Duration::from_secs(3600);
    /// How long a test waits for something that should take milliseconds:
    /// a bound on a hang, not a timing assertion.
    const PATIENCE: Duration = Duration::from_secs(20);

    #[test]
    fn queue_pops_in_deadline_order_and_ties_in_registration_order() {
        let mut q = TimerQueue::new(1000);
        let mut rng = SplitMix64::new(7);
        let mut expected = Vec::new();
        for i in 0..500u64 {
            // Few distinct deadlines, so ties are common.
            let deadline = 1_000 + rng.below(50);
            let id = q.push(deadline, i).unwrap();
            expected.push((deadline, id, i));
        }
        expected.sort();
        let mut got = Vec::new();
        while let Some(d) = q.pop_due(u64::MAX) {
            got.push((d.due_ns, d.id, d.payload));
        }
        assert_eq!(got, expected);
        assert!(q.is_empty());
    }

    #[test]
    fn queue_gives_only_what_is_due() {
        let mut q = TimerQueue::new(10);
        q.push(300, "c").unwrap();
        q.push(100, "a").unwrap();
        q.push(200, "b").unwrap();
        assert_eq!(q.next_deadline(), Some(100));
        assert!(q.pop_due(99).is_none());
        assert_eq!(q.pop_due(100).unwrap().payload, "a");
        assert_eq!(q.pop_due(250).unwrap().payload, "b");
        assert!(q.pop_due(250).is_none());
        assert_eq!(q.next_deadline(), Some(300));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn queue_removal() {
        let mut q = TimerQueue::new(10);
        let a = q.push(100, 'a').unwrap();
        let b = q.push(200, 'b').unwrap();
        assert_eq!(q.deadline_of(a), Some(100));
        assert_eq!(q.remove(a), Some('a'));
        assert_eq!(q.remove(a), None, "removed twice");
        assert_eq!(q.deadline_of(a), None);
        assert_eq!(q.next_deadline(), Some(200), "a removed timer is not next");
        assert_eq!(q.pop_due(1_000).map(|d| d.id), Some(b));
        assert_eq!(q.remove(b), None, "a popped timer cannot be removed");
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn queue_heap_stays_bounded_under_removals() {
        let mut q = TimerQueue::new(usize::MAX);
        let keep = q.push(u64::MAX, ()).unwrap();
        for i in 0..100_000u64 {
            let id = q.push(1_000_000 + i, ()).unwrap();
            assert!(q.remove(id).is_some());
            assert!(q.heap.len() <= 2 * q.len() + 65);
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_deadline(), Some(u64::MAX));
        assert_eq!(q.pop_due(u64::MAX).map(|d| d.id), Some(keep));
    }

    #[test]
    fn queue_maximum() {
        let mut q = TimerQueue::new(2);
        let a = q.push(1, ()).unwrap();
        q.push(2, ()).unwrap();
        assert_eq!(q.push(3, ()), Err(TimerError::Full { max: 2 }));
        q.remove(a);
        assert!(q.push(3, ()).is_ok(), "room again after a removal");
        assert!(q.pop_due(10).is_some());
        assert!(q.push(4, ()).is_ok(), "room again after a pop");
        let e = q.push(5, ()).unwrap_err();
        assert!(e.to_string().contains("at most 2"), "{e}");
    }

    #[test]
    fn deadlines_from_when() {
        assert_eq!(
            When::After(Duration::from_micros(5)).deadline_ns(1_000),
            6_000
        );
        assert_eq!(When::At(42).deadline_ns(1_000), 42);
        assert_eq!(When::After(Duration::MAX).deadline_ns(1), u64::MAX);
        assert_eq!(
            When::from(Duration::from_nanos(3)),
            When::After(Duration::from_nanos(3))
        );
    }

    /// Every callback runs exactly once, never before its deadline, for
    /// each way of waiting.
    #[test]
    fn callbacks_fire_once_and_never_early() {
        for strategy in [
            Strategy::HYBRID_DEFAULT,
            Strategy::ClockNanosleepAbs,
            Strategy::Spin,
        ] {
            let n = 200;
            let service = TimerService::with_strategy(n, strategy).unwrap();
            let counts: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let early = Arc::new(AtomicUsize::new(0));
            let (done_tx, done_rx) = mpsc::channel();
            let fired = Arc::new(AtomicUsize::new(0));
            let mut rng = SplitMix64::new(11);
            for i in 0..n {
                let (counts, early, fired, done_tx) = (
                    Arc::clone(&counts),
                    Arc::clone(&early),
                    Arc::clone(&fired),
                    done_tx.clone(),
                );
                let delay = Duration::from_micros(rng.below(20_000));
                service
                    .register(When::After(delay), move |f: Fired| {
                        if f.fired_ns < f.due_ns || monotonic_ns() < f.due_ns {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                        counts[i].fetch_add(1, Ordering::SeqCst);
                        if fired.fetch_add(1, Ordering::SeqCst) + 1 == n {
                            let _ = done_tx.send(());
                        }
                    })
                    .unwrap();
            }
            done_rx.recv_timeout(PATIENCE).expect("every timer fires");
            assert_eq!(early.load(Ordering::SeqCst), 0, "{strategy:?} fired early");
            assert!(
                counts.iter().all(|c| c.load(Ordering::SeqCst) == 1),
                "{strategy:?}: a callback ran other than once"
            );
            assert_eq!(service.pending(), 0);
            service.shutdown();
        }
    }

    #[test]
    fn an_earlier_timer_wakes_the_service() {
        for strategy in [Strategy::HYBRID_DEFAULT, Strategy::ClockNanosleepAbs] {
            let service = TimerService::with_strategy(10, strategy).unwrap();
            let (tx, rx) = mpsc::channel();
            let late_tx = tx.clone();
            service
                .register(When::After(FAR), move |_| {
                    let _ = late_tx.send("far");
                })
                .unwrap();
            // Let the service settle into its wait for the far timer.
            std::thread::sleep(Duration::from_millis(20));
            service
                .register(When::After(Duration::from_millis(1)), move |_| {
                    let _ = tx.send("near");
                })
                .unwrap();
            assert_eq!(rx.recv_timeout(PATIENCE), Ok("near"), "{strategy:?}");
        }
    }

    #[test]
    fn removed_timers_do_not_fire() {
        let service = TimerService::new(10).unwrap();
        let (tx, rx) = mpsc::channel();
        let removed_tx = tx.clone();
        let id = service
            .register(When::After(Duration::from_millis(2)), move |_| {
                let _ = removed_tx.send("removed");
            })
            .unwrap();
        assert!(service.remove(id));
        assert!(!service.remove(id), "removed twice");
        service
            .register(When::After(Duration::from_millis(5)), move |_| {
                let _ = tx.send("kept");
            })
            .unwrap();
        assert_eq!(rx.recv_timeout(PATIENCE), Ok("kept"));
        assert!(rx.try_recv().is_err(), "the removed timer fired");
    }

    #[test]
    fn the_maximum_is_enforced_and_frees_up() {
        let service = TimerService::new(3).unwrap();
        assert_eq!(service.max_timers(), 3);
        let (tx, rx) = mpsc::channel();
        let quick_tx = tx.clone();
        service
            .register(When::After(Duration::from_millis(1)), move |_| {
                let _ = quick_tx.send(());
            })
            .unwrap();
        service.register(When::After(FAR), |_| {}).unwrap();
        service.register(When::After(FAR), |_| {}).unwrap();
        let err = service.register(When::After(FAR), |_| {}).unwrap_err();
        assert_eq!(err, TimerError::Full { max: 3 });
        rx.recv_timeout(PATIENCE).unwrap();
        // The fired timer no longer counts.
        assert!(service.register(When::After(FAR), |_| {}).is_ok());
        drop(tx);
    }

    #[test]
    fn callbacks_may_register_and_remove() {
        let service = Arc::new(TimerService::new(10).unwrap());
        let (tx, rx) = mpsc::channel();
        let far = service.register(When::After(FAR), |_| {}).unwrap();
        let inner = Arc::clone(&service);
        service
            .register(When::After(Duration::from_millis(1)), move |_| {
                let removed = inner.remove(far);
                let tx2 = tx.clone();
                inner
                    .register(When::After(Duration::from_millis(1)), move |_| {
                        let _ = tx2.send(removed);
                    })
                    .unwrap();
            })
            .unwrap();
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(true));
        assert_eq!(service.pending(), 0);
    }

    #[test]
    fn a_panicking_callback_is_contained() {
        let service = TimerService::new(10).unwrap();
        let (tx, rx) = mpsc::channel();
        service
            .register(When::After(Duration::ZERO), |_| {
                panic!("callback panics on purpose")
            })
            .unwrap();
        service
            .register(When::After(Duration::from_millis(2)), move |_| {
                let _ = tx.send(());
            })
            .unwrap();
        rx.recv_timeout(PATIENCE).expect("the service goes on");
        assert_eq!(service.panicked(), 1);
    }

    /// Sets a flag when dropped: tells whether a callback was dropped.
    struct DropFlag(Arc<AtomicUsize>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn shutdown_drops_pending_callbacks_without_running_them() {
        let service = TimerService::new(100).unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..50 {
            let flag = DropFlag(Arc::clone(&dropped));
            let ran = Arc::clone(&ran);
            service
                .register(When::After(FAR), move |_| {
                    let _keep = &flag;
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        let started = monotonic_ns();
        service.shutdown();
        // Shutdown does not wait for the pending deadlines (an hour away).
        assert!(monotonic_ns() - started < PATIENCE.as_nanos() as u64);
        assert_eq!(dropped.load(Ordering::SeqCst), 50);
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn drop_stops_the_thread() {
        let service = TimerService::new(4).unwrap();
        let shared = Arc::clone(&service.shared);
        drop(service);
        assert!(shared.lock().stopping);
        assert_eq!(Arc::strong_count(&shared), 1, "the thread has exited");
    }

    #[test]
    fn the_service_thread_runs_with_minimal_timer_slack() {
        let service = TimerService::new(1).unwrap();
        let (tx, rx) = mpsc::channel();
        service
            .register(When::After(Duration::ZERO), move |_| {
                let _ = tx.send(crate::sleep::timer_slack());
            })
            .unwrap();
        assert_eq!(
            rx.recv_timeout(PATIENCE).unwrap(),
            Some(Duration::from_nanos(1))
        );
    }

    #[test]
    fn fired_lateness() {
        let f = Fired {
            id: TimerId(1),
            due_ns: 100,
            fired_ns: 130,
        };
        assert_eq!(f.lateness_ns(), 30);
    }
}
