//! The timer service of the SOS design document section 2, as a small reusable component:
//! register a callback to run after a delay (or at a moment), remove it
//! before it fires, at most a configured number pending at once, and
//! nanosecond time stamps on CLOCK_MONOTONIC. `time.timers` measures how
//! late its callbacks fire, and machine's heartbeat runs on it. (The link
//! emulator keeps its own queues of packets, not a `TimerQueue`.)
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
//!   in registration order (ids increase). A caller with its own loop
//!   asks [`TimerQueue::next_deadline`], waits, and takes what
//!   [`TimerQueue::pop_due`] gives.
//! - [`TimerService`]: one thread that runs a `TimerQueue` of callbacks. It
//!   waits until the earliest deadline with a [`Strategy`] (by default the
//!   hybrid of [`Strategy::HYBRID_DEFAULT`]: block until 50 us before, spin
//!   the rest), then calls each due callback with a [`Fired`] record
//!   (due and actual time, so lateness = fired - due).
//!
//! Periodic timers (the SOS clock driver's 100 ms heartbeat). A periodic
//! timer keeps its id and fires every `period` until removed; each firing
//! is numbered (`tick`, from 0). How its next deadline is set is the
//! [`Rearm`] given at registration:
//!
//! - [`Rearm::Absolute`]: next = first + (tick + 1) * period. The
//!   deadlines form a fixed grid, so lateness never accumulates: a late
//!   tick makes only itself late. Ticks that a stall let pass are fired
//!   back to back, none is skipped, so the number of ticks always says how
//!   many periods have elapsed (what a heartbeat that counts time needs).
//! - [`Rearm::FromFired`]: next = fired + period, where fired is when the
//!   callback was called; what a callback that registers its successor
//!   does. Every tick's lateness is carried into all later deadlines, so
//!   the ticks drift behind the grid; `time.timers mode=rearm` measures it.
//!
//! A periodic timer is re-armed after its callback returns; removing it
//! while its callback runs stops it (the call that runs is not undone).
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
use std::collections::{BinaryHeap, HashMap, HashSet};
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
    /// A periodic timer's period was zero (it would fire without end).
    #[error("a periodic timer's period must be at least 1 ns, not 0")]
    ZeroPeriod,
}

/// How a periodic timer's next deadline is set (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rearm {
    /// next = first + (tick + 1) * period: a fixed grid, no drift.
    Absolute,
    /// next = fired + period: each tick's lateness carries into the next.
    FromFired,
}

impl Rearm {
    /// The word used in parameters and notes.
    pub fn name(self) -> &'static str {
        match self {
            Rearm::Absolute => "absolute",
            Rearm::FromFired => "rearm",
        }
    }
}

/// What makes a timer periodic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periodic {
    /// The first deadline, CLOCK_MONOTONIC nanoseconds: tick 0's.
    pub first_ns: u64,
    /// Nanoseconds between ticks (never 0).
    pub period_ns: u64,
    pub rearm: Rearm,
}

impl Periodic {
    /// Where tick `tick` would be on the grid of `first_ns + k * period`:
    /// every tick's deadline under [`Rearm::Absolute`]; what
    /// [`Rearm::FromFired`] drifts away from.
    pub fn grid_ns(&self, tick: u64) -> u64 {
        self.first_ns
            .saturating_add(tick.saturating_mul(self.period_ns))
    }

    /// The deadline after tick `tick`, which was called at `fired_ns`.
    fn next_deadline(&self, tick: u64, fired_ns: u64) -> u64 {
        match self.rearm {
            Rearm::Absolute => self.grid_ns(tick.saturating_add(1)),
            Rearm::FromFired => fired_ns.saturating_add(self.period_ns),
        }
    }
}

/// A timer that is due, as [`TimerQueue::pop_due`] hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<T> {
    pub id: TimerId,
    /// Its deadline, CLOCK_MONOTONIC nanoseconds.
    pub due_ns: u64,
    pub payload: T,
    /// Which firing of a periodic timer this is (from 0); 0 for a one-shot.
    pub tick: u64,
    /// Set for a periodic timer: give it back with [`TimerQueue::rearm`].
    pub periodic: Option<Periodic>,
}

/// A pending timer in [`TimerQueue`].
#[derive(Debug)]
struct Entry<T> {
    deadline: u64,
    payload: T,
    tick: u64,
    periodic: Option<Periodic>,
}

/// Pending timers in order of deadline; no thread, no clock. See the
/// module documentation.
#[derive(Debug)]
pub struct TimerQueue<T> {
    /// (deadline, id), earliest first; may hold stale entries of removed
    /// timers, but never at the top.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// The live timers by id.
    live: HashMap<u64, Entry<T>>,
    /// Periodic timers handed out by `pop_due` and not yet given back with
    /// `rearm`: still registered (they count against the maximum), and
    /// removing one here stops it.
    firing: HashSet<u64>,
    next_id: u64,
    max: usize,
}

impl<T> TimerQueue<T> {
    /// An empty queue holding at most `max` pending timers.
    pub fn new(max: usize) -> TimerQueue<T> {
        TimerQueue {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            firing: HashSet::new(),
            next_id: 0,
            max,
        }
    }

    /// The most timers that may be pending at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Pending timers (a periodic timer being fired counts: it is still
    /// registered).
    pub fn len(&self) -> usize {
        self.live.len() + self.firing.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add a timer due at `deadline_ns` (CLOCK_MONOTONIC nanoseconds; a
    /// past deadline is due at once).
    pub fn push(&mut self, deadline_ns: u64, payload: T) -> Result<TimerId, TimerError> {
        self.insert(deadline_ns, payload, None)
    }

    /// Add a periodic timer: first due at `first_ns`, then every
    /// `period_ns` as `rearm` says, each time it is given back with
    /// [`TimerQueue::rearm`].
    pub fn push_periodic(
        &mut self,
        first_ns: u64,
        period_ns: u64,
        rearm: Rearm,
        payload: T,
    ) -> Result<TimerId, TimerError> {
        if period_ns == 0 {
            return Err(TimerError::ZeroPeriod);
        }
        let periodic = Periodic {
            first_ns,
            period_ns,
            rearm,
        };
        self.insert(first_ns, payload, Some(periodic))
    }

    fn insert(
        &mut self,
        deadline: u64,
        payload: T,
        periodic: Option<Periodic>,
    ) -> Result<TimerId, TimerError> {
        if self.len() >= self.max {
            return Err(TimerError::Full { max: self.max });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((deadline, id)));
        let entry = Entry {
            deadline,
            payload,
            tick: 0,
            periodic,
        };
        self.live.insert(id, entry);
        Ok(TimerId(id))
    }

    /// Give back a periodic timer that [`TimerQueue::pop_due`] handed out
    /// once its tick is done (`fired_ns`: when it was acted on, which
    /// [`Rearm::FromFired`] counts from). It is pending again under the
    /// same id, due at its next deadline. Gives the payload back instead
    /// when the timer is not to run again: it is one-shot, or was removed
    /// while out.
    pub fn rearm(&mut self, due: Due<T>, fired_ns: u64) -> Result<TimerId, T> {
        let Some(periodic) = due.periodic else {
            return Err(due.payload);
        };
        if !self.firing.remove(&due.id.0) {
            return Err(due.payload);
        }
        let deadline = periodic.next_deadline(due.tick, fired_ns);
        self.heap.push(Reverse((deadline, due.id.0)));
        let entry = Entry {
            deadline,
            payload: due.payload,
            tick: due.tick.saturating_add(1),
            periodic: Some(periodic),
        };
        self.live.insert(due.id.0, entry);
        Ok(due.id)
    }

    /// True while a periodic timer is out between `pop_due` and `rearm`.
    pub fn is_firing(&self, id: TimerId) -> bool {
        self.firing.contains(&id.0)
    }

    /// Remove a pending timer and give back its payload; None if it is not
    /// pending (already popped, removed, or never existed). A periodic
    /// timer that is out firing is stopped too (it will not be re-armed),
    /// but its payload is with the caller of `pop_due`, so None.
    pub fn remove(&mut self, id: TimerId) -> Option<T> {
        if self.firing.remove(&id.0) {
            return None;
        }
        let Entry { payload, .. } = self.live.remove(&id.0)?;
        self.drop_stale_top();
        // Rebuild once stale entries outnumber live ones: keeps the heap
        // within twice the live size (plus slack, so that a small queue is
        // not rebuilt on every removal).
        if self.heap.len() > 2 * self.live.len() + 64 {
            self.heap = self
                .live
                .iter()
                .map(|(&id, entry)| Reverse((entry.deadline, id)))
                .collect();
        }
        Some(payload)
    }

    /// The deadline of a pending timer.
    pub fn deadline_of(&self, id: TimerId) -> Option<u64> {
        self.live.get(&id.0).map(|entry| entry.deadline)
    }

    /// The earliest deadline pending.
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((deadline, _))| *deadline)
    }

    /// The earliest timer if it is due at `now_ns` (deadline <= now);
    /// call repeatedly to take every due timer, earliest first. A periodic
    /// timer stays registered: give it back with [`TimerQueue::rearm`].
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Due<T>> {
        let &Reverse((deadline, id)) = self.heap.peek()?;
        if deadline > now_ns {
            return None;
        }
        self.heap.pop();
        // The top is never stale, so the id is live.
        let entry = self.live.remove(&id)?;
        if entry.periodic.is_some() {
            self.firing.insert(id);
        }
        self.drop_stale_top();
        Some(Due {
            id: TimerId(id),
            due_ns: entry.deadline,
            payload: entry.payload,
            tick: entry.tick,
            periodic: entry.periodic,
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
    /// Which firing of a periodic timer this is (from 0); 0 for a one-shot.
    pub tick: u64,
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

/// What the service calls each time a periodic timer fires.
pub type PeriodicCallback = Box<dyn FnMut(Fired) + Send>;

/// A pending timer's callback in the service's queue.
enum Action {
    Once(Callback),
    Every(PeriodicCallback),
}

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
    queue: TimerQueue<Action>,
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
        self.insert(deadline, |queue| {
            queue.push(deadline, Action::Once(Box::new(callback)))
        })
    }

    /// Call `callback` at `first`, then every `period` (next deadline as
    /// `rearm` says) until the timer is removed or the service stops.
    /// Fails when `max_timers` are pending or the period is zero. A
    /// callback that panics is not called again.
    pub fn register_periodic<F>(
        &self,
        first: When,
        period: Duration,
        rearm: Rearm,
        callback: F,
    ) -> Result<TimerId, TimerError>
    where
        F: FnMut(Fired) + Send + 'static,
    {
        let first_ns = first.deadline_ns(monotonic_ns());
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        self.insert(first_ns, |queue| {
            queue.push_periodic(
                first_ns,
                period_ns,
                rearm,
                Action::Every(Box::new(callback)),
            )
        })
    }

    /// Add a timer due at `deadline` with `push`, waking the service
    /// thread when it is the new earliest.
    fn insert(
        &self,
        deadline: u64,
        push: impl FnOnce(&mut TimerQueue<Action>) -> Result<TimerId, TimerError>,
    ) -> Result<TimerId, TimerError> {
        let (id, earliest) = {
            let mut state = self.shared.lock();
            let before = state.queue.next_deadline();
            let id = push(&mut state.queue)?;
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

    /// Cancel a pending timer: true if it was pending and will not fire
    /// (again, for a periodic timer: one whose callback is running is
    /// stopped after the call); false if a one-shot timer has fired or is
    /// firing, or the timer was removed or never existed.
    pub fn remove(&self, id: TimerId) -> bool {
        // The callback is dropped after the lock is released (its drop is
        // user code). No wake-up: the service finds nothing due at the old
        // deadline and waits again.
        let (removed, was_firing) = {
            let mut state = self.shared.lock();
            let was_firing = state.queue.is_firing(id);
            (state.queue.remove(id), was_firing)
        };
        removed.is_some() || was_firing
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
    let mut due: Vec<Due<Action>> = Vec::new();
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
                fire(shared, d);
            }
            // Firing took time: look again before waiting.
            continue;
        }
        wait(shared, deadline, generation);
    }
}

/// Call one due timer's callback, outside the lock, and give a periodic
/// one back to the queue.
fn fire(shared: &Shared, mut d: Due<Action>) {
    let fired = Fired {
        id: d.id,
        due_ns: d.due_ns,
        fired_ns: monotonic_ns(),
        tick: d.tick,
    };
    let panicked = match d.payload {
        Action::Once(callback) => catch_unwind(AssertUnwindSafe(move || callback(fired))).is_err(),
        Action::Every(ref mut callback) => {
            let panicked = catch_unwind(AssertUnwindSafe(|| callback(fired))).is_err();
            // A periodic timer goes back unless it panicked (its state may
            // be broken) or the service is stopping; what is not re-armed
            // is dropped after the lock is released (its drop is user code).
            let mut state = shared.lock();
            let unarmed = if panicked || state.stopping {
                state.queue.remove(d.id);
                Some(d.payload)
            } else {
                state.queue.rearm(d, fired.fired_ns).err()
            };
            drop(state);
            drop(unarmed);
            panicked
        }
    };
    if panicked {
        shared.panicked.fetch_add(1, Ordering::Relaxed);
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
            tick: 0,
        };
        assert_eq!(f.lateness_ns(), 30);
    }

    #[test]
    fn queue_absolute_periodic_keeps_its_grid_and_catches_up() {
        let mut q = TimerQueue::new(4);
        let id = q.push_periodic(1_000, 100, Rearm::Absolute, 'p').unwrap();
        let d = q.pop_due(1_000).unwrap();
        assert_eq!((d.id, d.due_ns, d.tick), (id, 1_000, 0));
        assert_eq!(
            q.len(),
            1,
            "a periodic timer being fired is still registered"
        );
        assert!(q.is_firing(id));
        // Acted on late: the next deadline stays on the grid.
        assert_eq!(q.rearm(d, 1_050), Ok(id));
        assert_eq!(q.deadline_of(id), Some(1_100));
        assert!(q.pop_due(1_099).is_none());
        // A stall past two deadlines: the missed ticks come back to back.
        let d = q.pop_due(1_330).unwrap();
        assert_eq!((d.due_ns, d.tick), (1_100, 1));
        q.rearm(d, 1_330).unwrap();
        let d = q.pop_due(1_330).unwrap();
        assert_eq!((d.due_ns, d.tick), (1_200, 2));
        q.rearm(d, 1_331).unwrap();
        let d = q.pop_due(1_331).unwrap();
        assert_eq!((d.due_ns, d.tick), (1_300, 3));
        let p = d.periodic.unwrap();
        assert_eq!(p.grid_ns(d.tick), d.due_ns);
        q.rearm(d, 1_332).unwrap();
        assert!(q.pop_due(1_399).is_none());
        assert_eq!(q.next_deadline(), Some(1_400));
    }

    #[test]
    fn queue_rearm_from_fired_carries_lateness() {
        let mut q = TimerQueue::new(4);
        let id = q.push_periodic(1_000, 100, Rearm::FromFired, ()).unwrap();
        let d = q.pop_due(1_010).unwrap();
        q.rearm(d, 1_010).unwrap();
        assert_eq!(q.deadline_of(id), Some(1_110));
        let d = q.pop_due(1_200).unwrap();
        assert_eq!(d.tick, 1);
        q.rearm(d, 1_200).unwrap();
        assert_eq!(q.deadline_of(id), Some(1_300), "the grid would say 1_200");
    }

    #[test]
    fn queue_periodic_removal_and_limits() {
        let mut q = TimerQueue::new(2);
        assert_eq!(
            q.push_periodic(1, 0, Rearm::Absolute, 'z'),
            Err(TimerError::ZeroPeriod)
        );
        // Removed while pending: gone, payload back.
        let a = q.push_periodic(10, 10, Rearm::Absolute, 'a').unwrap();
        assert_eq!(q.remove(a), Some('a'));
        assert!(q.is_empty());
        // Removed while firing: not re-armed, the payload comes back from rearm.
        let b = q.push_periodic(10, 10, Rearm::Absolute, 'b').unwrap();
        let d = q.pop_due(10).unwrap();
        q.push(1_000, 'x').unwrap();
        assert_eq!(
            q.push(1_000, 'y'),
            Err(TimerError::Full { max: 2 }),
            "a firing periodic timer holds its place"
        );
        assert_eq!(q.remove(b), None);
        assert!(!q.is_firing(b));
        assert_eq!(q.rearm(d, 10), Err('b'));
        assert_eq!(q.len(), 1);
        // A one-shot timer is never re-armed.
        let d = q.pop_due(1_000).unwrap();
        assert_eq!(d.periodic, None);
        assert_eq!(q.rearm(d, 1_000), Err('x'));
        assert!(q.is_empty());
        let e = TimerError::ZeroPeriod.to_string();
        assert!(e.contains("period") && e.contains("not 0"), "{e}");
    }

    /// Collects the ticks of a periodic timer on the service, then removes it.
    fn ticks_of(rearm: Rearm, period: Duration, count: usize) -> (Vec<Fired>, TimerService) {
        let service = TimerService::new(4).unwrap();
        let (tx, rx) = mpsc::channel();
        let id = service
            .register_periodic(When::After(period), period, rearm, move |f| {
                let _ = tx.send(f);
            })
            .unwrap();
        assert_eq!(service.pending(), 1);
        let ticks: Vec<Fired> = (0..count)
            .map(|_| rx.recv_timeout(PATIENCE).expect("the next tick"))
            .collect();
        assert!(
            service.remove(id),
            "a periodic timer is pending until removed"
        );
        // A tick that was running when it was removed may still arrive;
        // after that, none.
        while rx.recv_timeout(period * 5).is_ok() {}
        std::thread::sleep(period * 5);
        assert!(rx.try_recv().is_err(), "{rearm:?}: ticked after removal");
        assert_eq!(service.pending(), 0);
        assert!(ticks.iter().all(|f| f.id == id));
        (ticks, service)
    }

    #[test]
    fn absolute_periodic_ticks_stay_on_their_grid() {
        let period = Duration::from_millis(2);
        let (ticks, _service) = ticks_of(Rearm::Absolute, period, 25);
        let first = ticks[0].due_ns;
        for (k, f) in ticks.iter().enumerate() {
            assert_eq!(f.tick, k as u64);
            assert_eq!(f.due_ns, first + k as u64 * period.as_nanos() as u64);
            assert!(f.fired_ns >= f.due_ns, "tick {k} fired early");
        }
    }

    #[test]
    fn rearmed_periodic_ticks_drift_and_never_catch_up() {
        let period = Duration::from_millis(2);
        let period_ns = period.as_nanos() as u64;
        let (ticks, _service) = ticks_of(Rearm::FromFired, period, 25);
        let first = ticks[0].due_ns;
        let mut drift_before = 0;
        for (k, f) in ticks.iter().enumerate() {
            assert_eq!(f.tick, k as u64);
            if k > 0 {
                assert_eq!(f.due_ns, ticks[k - 1].fired_ns + period_ns);
            }
            // Behind the grid by at least as much as the tick before.
            let drift = f.fired_ns - (first + k as u64 * period_ns);
            assert!(drift >= drift_before, "tick {k}: drift shrank");
            drift_before = drift;
        }
        assert!(drift_before > 0, "25 ticks that were never late at all");
    }

    #[test]
    fn a_panicking_periodic_callback_is_stopped() {
        let service = TimerService::new(4).unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        service
            .register_periodic(
                When::After(Duration::ZERO),
                Duration::from_millis(1),
                Rearm::Absolute,
                move |_| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    panic!("periodic callback panics on purpose")
                },
            )
            .unwrap();
        let (tx, rx) = mpsc::channel();
        service
            .register(When::After(Duration::from_millis(20)), move |_| {
                let _ = tx.send(());
            })
            .unwrap();
        rx.recv_timeout(PATIENCE).expect("the service goes on");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(service.panicked(), 1);
        assert_eq!(service.pending(), 0);
        assert_eq!(
            service.register_periodic(When::After(FAR), Duration::ZERO, Rearm::Absolute, |_| {}),
            Err(TimerError::ZeroPeriod)
        );
    }
}
