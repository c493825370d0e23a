//! Several processes on one pager, as SOS ran them: one frame table, one
//! swap, and the memory of every process served by one handler thread.
//!
//! Each process is a real one (a fork of the caller) with its own address
//! space: its region is a memfd it maps and registers with a userfaultfd
//! of its own, which it passes to the pager over a Unix socket
//! ([`child`], [`wire`]). The pager serves every process's faults from
//! one [`frames::Frames`] table under global replacement (one policy over
//! all frames: a fault of one process may evict another's page) or local
//! replacement (a quota of frames per process), and one swap map.
//!
//! A process's heap starts empty after its data region and grows by brk
//! (a message to the pager, which grows that process's page table); a
//! touch past the break gets SIGBUS, and the pager says why.
//!
//! A process that ends (its work done, or killed mid-run) gives its
//! frames and swap slots back at once; the others go on. The outcome
//! lists, per process, how it ended, its faults, its progress rate and
//! its own check of its data, and a fairness figure over the rates.

pub mod child;
pub mod error;
pub mod frames;
mod handler;
pub mod wire;
pub mod workloads;

pub use child::ProcessMemory;
pub use frames::Replacement;

use crate::pager::{memfd, page_size, Mapping, PagerError};
use crate::swap::SwapBackend;
use crate::uffd::Userfaultfd;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wire::{receive, Message, Received};

/// The code each process runs on its memory: given its index, it works,
/// checks its own data and returns what it checked (or what went wrong).
pub type Workload<'a> =
    dyn Fn(usize, &mut ProcessMemory) -> Result<String, error::WorkloadError> + Sync + 'a;

/// One process's memory: a data region, and room for its heap to grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSpec {
    pub data_pages: u64,
    /// The heap may grow to this many pages (brk beyond is refused).
    pub heap_limit_pages: u64,
}

/// The shared pager's set-up.
pub struct SharedConfig {
    pub processes: Vec<ProcessSpec>,
    /// Frames of the one frame table, shared by all processes.
    pub frames: usize,
    pub replacement: Replacement,
    /// fifo, clock or lru.
    pub policy: String,
    pub swap: Box<dyn SwapBackend>,
    /// Slots the swap may use (default: one per page of every process).
    pub swap_slots: Option<u64>,
    pub handler_cpu: Option<usize>,
}

/// One process's counters, as the pager kept them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Faults served: zero-fills + swap-ins + referenced-bit faults.
    pub faults: u64,
    pub zero_fills: u64,
    pub swap_ins: u64,
    pub referenced_bit_faults: u64,
    /// This process's pages evicted (by its own faults or another's).
    pub evictions: u64,
    pub write_backs: u64,
    pub bits_cleared: u64,
    /// Round trips to this process's agent (an unmap the pager had to
    /// wait for).
    pub agent_round_trips: u64,
    /// Faults answered with SIGBUS.
    pub failures: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    faults: AtomicU64,
    zero_fills: AtomicU64,
    swap_ins: AtomicU64,
    referenced_bit_faults: AtomicU64,
    evictions: AtomicU64,
    write_backs: AtomicU64,
    bits_cleared: AtomicU64,
    agent_round_trips: AtomicU64,
    failures: AtomicU64,
}

impl LiveCounters {
    fn snapshot(&self) -> ProcessCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProcessCounters {
            faults: get(&self.faults),
            zero_fills: get(&self.zero_fills),
            swap_ins: get(&self.swap_ins),
            referenced_bit_faults: get(&self.referenced_bit_faults),
            evictions: get(&self.evictions),
            write_backs: get(&self.write_backs),
            bits_cleared: get(&self.bits_cleared),
            agent_round_trips: get(&self.agent_round_trips),
            failures: get(&self.failures),
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
}

/// One process, after the run.
#[derive(Debug, Clone)]
pub struct ProcessOutcome {
    pub pid: i32,
    pub ending: Ending,
    /// The workload's accesses and time, if it got that far.
    pub accesses: Option<u64>,
    pub elapsed: Option<Duration>,
    /// The counters when the workload ended (before its check).
    pub counters_at_done: Option<ProcessCounters>,
    /// The counters when the process ended.
    pub counters: ProcessCounters,
    /// What the process's own check of its data said.
    pub verdict: Option<(bool, String)>,
    /// Why the pager refused one of its accesses, if it did.
    pub pager_error: Option<String>,
    /// Frames and swap slots it held when it ended (all given back).
    pub freed_frames: usize,
    pub freed_slots: u64,
    /// Its heap at the end, and the page table's leaves (512 entries each).
    pub heap_pages: u64,
    pub table_leaves: usize,
}

impl ProcessOutcome {
    /// Exited 0 after its check found its data intact.
    pub fn verified(&self) -> bool {
        self.ending == Ending::Exited(child::EXIT_OK) && self.verdict.as_ref().is_some_and(|v| v.0)
    }

    /// Accesses per second of the workload proper.
    pub fn rate(&self) -> Option<f64> {
        match (self.accesses, self.elapsed) {
            (Some(a), Some(e)) if a > 0 && !e.is_zero() => Some(a as f64 / e.as_secs_f64()),
            _ => None,
        }
    }

    /// How it ended, in words.
    pub fn describe_ending(&self) -> String {
        match self.ending {
            Ending::Exited(child::EXIT_OK) => "exited 0".into(),
            Ending::Exited(child::EXIT_SIGBUS) => "stopped by SIGBUS".into(),
            Ending::Exited(code) => format!("exited {code}"),
            Ending::Signaled(signal) => format!("killed by signal {signal}"),
        }
    }
}

/// The run.
#[derive(Debug, Clone)]
pub struct SharedOutcome {
    pub processes: Vec<ProcessOutcome>,
    pub frames: usize,
    pub replacement: Replacement,
    pub policy: String,
    /// Frames each process may use (all of them under global).
    pub quotas: Vec<usize>,
    /// Evictions of one process's page to serve another's fault.
    pub evictions_across: u64,
    /// After every process ended: frames still held and swap slots still
    /// in use (both 0 unless the pager leaks).
    pub frames_in_use_at_end: usize,
    pub slots_in_use_at_end: u64,
    pub swap: String,
}

impl SharedOutcome {
    /// Jain's fairness index over the progress rates of the processes
    /// that finished their work: 1 when all progressed alike, 1/n when
    /// one had it all.
    pub fn fairness(&self) -> Option<f64> {
        let rates: Vec<f64> = self.processes.iter().filter_map(|p| p.rate()).collect();
        jain(&rates)
    }
}

/// Jain's index: (sum x)^2 / (n * sum x^2), in (0, 1].
pub fn jain(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|v| v * v).sum();
    if values.is_empty() || squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (values.len() as f64 * squares))
}

/// The running shared pager: its processes work while the handler thread
/// serves them.
pub struct SharedPager {
    pids: Vec<i32>,
    live: Arc<Vec<LiveCounters>>,
    stop: Arc<AtomicBool>,
    handler: Option<JoinHandle<SharedOutcome>>,
}

impl SharedPager {
    /// Fork the processes, take their userfaultfds and start serving.
    /// The forks happen on this thread, and a process dies with it
    /// (PR_SET_PDEATHSIG): keep this thread until [`SharedPager::wait`].
    pub fn start(config: SharedConfig, workload: &Workload<'_>) -> Result<SharedPager, PagerError> {
        let n = config.processes.len();
        if n == 0 {
            return Err(PagerError::Config("at least one process".into()));
        }
        if config.frames == 0 {
            return Err(PagerError::Config("frames must be at least 1".into()));
        }
        let frames = frames::Frames::new(config.frames, n, config.replacement, &config.policy)
            .map_err(|e| PagerError::Config(e.to_string()))?;
        let page_size = page_size();
        let mut forked = Forked::default();
        for (index, spec) in config.processes.iter().enumerate() {
            forked.fork(index, spec, page_size, workload)?;
        }
        // Every process registers its region and says where it is.
        let mut processes = Vec::with_capacity(n);
        let live: Arc<Vec<LiveCounters>> = Arc::new((0..n).map(|_| Default::default()).collect());
        for (index, parts) in std::mem::take(&mut forked.parts).into_iter().enumerate() {
            processes.push(registered(index, forked.pids[index], parts, page_size)?);
        }
        let pids = std::mem::take(&mut forked.pids);
        let stop = Arc::new(AtomicBool::new(false));
        let slots = config.swap_slots.unwrap_or_else(|| {
            config
                .processes
                .iter()
                .map(|p| p.data_pages + p.heap_limit_pages)
                .sum()
        });
        let state = handler::Handler::new(
            processes,
            frames,
            config.replacement,
            config.policy.clone(),
            config.swap,
            slots,
            live.clone(),
            page_size,
        );
        let stop_flag = stop.clone();
        let handler_cpu = config.handler_cpu;
        let spawned = std::thread::Builder::new()
            .name("osprobe-shared-pager".into())
            .spawn(move || {
                if let Some(cpu) = handler_cpu {
                    let _ = osprobe_core::affinity::pin_current_thread(cpu);
                }
                state.serve(&stop_flag)
            });
        let handler = match spawned {
            Ok(h) => h,
            Err(e) => {
                // The processes (and their state) went with the closure:
                // they end when their sockets close.
                for pid in &pids {
                    reap(*pid);
                }
                return Err(PagerError::Io {
                    what: "starting the handler thread".into(),
                    source: e,
                });
            }
        };
        Ok(SharedPager {
            pids,
            live,
            stop,
            handler: Some(handler),
        })
    }

    pub fn pids(&self) -> &[i32] {
        &self.pids
    }

    /// Process `index`'s counters now.
    pub fn counters(&self, index: usize) -> ProcessCounters {
        self.live[index].snapshot()
    }

    /// Send `signal` to process `index` (a test killing one mid-run).
    pub fn kill(&self, index: usize, signal: i32) {
        // SAFETY: signalling our own child, not yet reaped (the handler
        // reaps it only after its sockets close, which this signal may
        // cause).
        unsafe { libc::kill(self.pids[index], signal) };
    }

    /// Stop every process now (an interrupt): they are killed.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Wait until every process has ended, stopping them all if `flag`
    /// is raised meanwhile (an interrupt).
    pub fn wait_or_stop(self, flag: &AtomicBool) -> Result<SharedOutcome, PagerError> {
        while self.handler.as_ref().is_some_and(|h| !h.is_finished()) {
            if flag.load(Ordering::Relaxed) {
                self.stop();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.wait()
    }

    /// Wait until every process has ended.
    pub fn wait(mut self) -> Result<SharedOutcome, PagerError> {
        match self.handler.take().map(|h| h.join()) {
            Some(Ok(outcome)) => Ok(outcome),
            _ => Err(PagerError::Config(
                "the pager's handler thread panicked".into(),
            )),
        }
    }
}

impl Drop for SharedPager {
    fn drop(&mut self) {
        if let Some(handler) = self.handler.take() {
            self.stop.store(true, Ordering::Release);
            let _ = handler.join();
        }
    }
}

/// What the parent keeps of each process until it has said hello.
struct Parts {
    spec: ProcessSpec,
    memfd: OwnedFd,
    own: Mapping,
    control: OwnedFd,
    agent: OwnedFd,
}

/// The processes forked so far: on an early error they are killed and
/// reaped, never left behind.
#[derive(Default)]
struct Forked {
    pids: Vec<i32>,
    parts: Vec<Parts>,
}

impl Forked {
    /// Fork process `index` over a memfd of its own (its data and heap
    /// reservation), with its control and agent sockets; the child runs
    /// `child::run` and never comes back.
    fn fork(
        &mut self,
        index: usize,
        spec: &ProcessSpec,
        page_size: usize,
        workload: &Workload<'_>,
    ) -> Result<(), PagerError> {
        let reserve = spec.data_pages + spec.heap_limit_pages;
        if reserve == 0 {
            return Err(PagerError::Config(format!(
                "process {index} has neither data pages nor room for a heap"
            )));
        }
        let len = (reserve as usize)
            .checked_mul(page_size)
            .filter(|l| *l <= 1 << 40)
            .ok_or_else(|| PagerError::Config(format!("{reserve} pages is too many")))?;
        let memfd = memfd(len)?;
        let own = Mapping::shared(&memfd, len)?;
        let io = |what: &str| {
            let what = what.to_string();
            move |source| PagerError::Io { what, source }
        };
        let (control, child_control) = wire::socket_pair().map_err(io("a socket pair"))?;
        let (agent, child_agent) = wire::socket_pair().map_err(io("a socket pair"))?;
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child runs only `child::run`, which ends in
        // _exit and takes no lock another thread may hold.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io("fork")(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            let child_memfd = memfd.try_clone().unwrap_or_else(|_| {
                // SAFETY: leaving the child at once.
                unsafe { libc::_exit(child::EXIT_SETUP) }
            });
            child::run(child::ChildSetup {
                index,
                parent,
                memfd: child_memfd,
                control: child_control,
                agent: child_agent,
                data_pages: spec.data_pages,
                heap_limit_pages: spec.heap_limit_pages,
                page_size,
                workload,
            });
        }
        drop(child_control);
        drop(child_agent);
        self.pids.push(pid);
        self.parts.push(Parts {
            spec: *spec,
            memfd,
            own,
            control,
            agent,
        });
        Ok(())
    }
}

/// Process `index` as the handler keeps it, once it has registered its
/// region and passed its userfaultfd (within 10 s).
fn registered(
    index: usize,
    pid: i32,
    parts: Parts,
    page_size: usize,
) -> Result<handler::Process, PagerError> {
    let (base, uffd) = match receive(&parts.control, 10_000) {
        Ok(Received::Message(
            Message::Hello {
                base,
                len,
                features,
            },
            Some(fd),
        )) if len == parts.own.len as u64 => {
            (base, Userfaultfd::from_received(fd, features, false))
        }
        Ok(Received::Message(Message::Verdict { text, .. }, _)) => {
            return Err(PagerError::Config(format!(
                "process {index} could not set up: {text}"
            )))
        }
        other => {
            let what = match other {
                Ok(Received::TimedOut) => "nothing within 10 s".to_string(),
                Ok(Received::Closed) => "it ended".to_string(),
                Ok(Received::Message(m, _)) => format!("{m:?}"),
                Err(e) => e.to_string(),
            };
            return Err(PagerError::Config(format!(
                "process {index} did not register its region: {what}"
            )));
        }
    };
    Ok(handler::Process::new(
        pid,
        parts.spec,
        base,
        uffd,
        parts.memfd,
        parts.own,
        parts.control,
        parts.agent,
        page_size,
    ))
}

impl Drop for Forked {
    fn drop(&mut self) {
        for pid in &self.pids {
            // SAFETY: our own child.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
            reap(*pid);
        }
    }
}

/// Wait for a child to end; how it ended.
pub(crate) fn reap(pid: i32) -> Ending {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Ending::Exited(-1);
    }
    if libc::WIFSIGNALED(status) {
        Ending::Signaled(libc::WTERMSIG(status))
    } else {
        Ending::Exited(libc::WEXITSTATUS(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equals_and_one_over_n_for_one_winner() {
        assert_eq!(jain(&[3.0, 3.0, 3.0]), Some(1.0));
        let j = jain(&[1.0, 0.0, 0.0, 0.0]).unwrap();
        assert!((j - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
