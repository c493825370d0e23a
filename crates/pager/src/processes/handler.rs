//! The shared pager's handler thread: one loop serving the faults of
//! every process, their brk calls, and their endings, over one frame
//! table and one swap.
//!
//! Eviction across address spaces. The page leaves the victim's process
//! as in `crate::pager` (unmapped first, hashed, written back if changed,
//! then punched out of its memfd), with one difference: the pager cannot
//! unmap a page in another address space, so it asks that process's agent
//! and waits for the acknowledgement. A victim of the faulting process
//! itself needs no such round trip: that process's one workload thread
//! waits in this very fault. Referenced bits cleared while choosing a
//! victim are sent to the agents without waiting, and one acknowledgement
//! per process is awaited before the fault is answered, so that a
//! process never runs on with a bit the pager believes clear still set.

use super::frames::{Frames, OwnedFrame, Replacement};
use super::wire::{receive, send, Message, Received, NO_PAGE};
use super::{
    reap, Ending, LiveCounters, ProcessCounters, ProcessOutcome, ProcessSpec, SharedOutcome,
};
use crate::error::FaultError;
use crate::pager::Mapping;
use crate::policy::{FrameId, ReferenceBits};
use crate::swap::{SwapBackend, SwapError, SwapMap, Verified};
use crate::table::{PageState, PageTable};
use crate::uffd::{Fault, Userfaultfd};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the pager waits for an agent's acknowledgement before it
/// counts the process as hung and kills it.
const AGENT_TIMEOUT_MS: i32 = 10_000;

/// Faults of one process served in a row before the handler polls every
/// process again.
const FAULTS_BEFORE_POLL: usize = 64;

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One process as the pager keeps it.
pub(super) struct Process {
    pid: i32,
    spec: ProcessSpec,
    base: u64,
    /// None once the process ended.
    running: Option<Running>,
    heap_pages: u64,
    table: PageTable,
    /// Unmaps sent to the agent since its last acknowledgement.
    unacknowledged: bool,
    done: Option<(u64, u64, ProcessCounters)>,
    verdict: Option<(bool, String)>,
    pager_error: Option<String>,
    ending: Option<Ending>,
    freed_frames: usize,
    freed_slots: u64,
    table_leaves: usize,
}

/// What a process holds while it runs.
struct Running {
    uffd: Userfaultfd,
    memfd: OwnedFd,
    own: Mapping,
    control: OwnedFd,
    agent: OwnedFd,
}

impl Process {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        pid: i32,
        spec: ProcessSpec,
        base: u64,
        uffd: Userfaultfd,
        memfd: OwnedFd,
        own: Mapping,
        control: OwnedFd,
        agent: OwnedFd,
        _page_size: usize,
    ) -> Process {
        Process {
            pid,
            spec,
            base,
            running: Some(Running {
                uffd,
                memfd,
                own,
                control,
                agent,
            }),
            heap_pages: 0,
            table: PageTable::new(spec.data_pages.max(1)),
            unacknowledged: false,
            done: None,
            verdict: None,
            pager_error: None,
            ending: None,
            freed_frames: 0,
            freed_slots: 0,
            table_leaves: 0,
        }
    }

    /// Whether `page` lies in the data region or below the break; if not,
    /// why not.
    fn check(&self, page: u64, address: u64) -> Result<(), FaultError> {
        let end = self.spec.data_pages + self.heap_pages;
        if page < end {
            return Ok(());
        }
        let reserve = self.spec.data_pages + self.spec.heap_limit_pages;
        Err(if page < reserve {
            FaultError::PastTheBreak {
                pid: self.pid,
                address,
                heap_page: page - self.spec.data_pages,
                break_pages: self.heap_pages,
            }
        } else {
            FaultError::OutsideProcess {
                pid: self.pid,
                address,
            }
        })
    }
}

/// A page-aligned page for UFFDIO_COPY's source.
struct Buffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: an anonymous mapping owned by the handler.
unsafe impl Send for Buffer {}

impl Buffer {
    fn new(len: usize) -> Buffer {
        // SAFETY: a fresh private anonymous mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "one page of memory for the pager");
        Buffer {
            ptr: ptr.cast(),
            len,
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: our mapping of len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub(super) struct Handler {
    processes: Vec<Process>,
    frames: Frames,
    replacement: Replacement,
    policy: String,
    swap: Verified,
    swap_map: SwapMap,
    live: Arc<Vec<LiveCounters>>,
    page_size: usize,
    buffer: Buffer,
    zero_hash: u128,
    evictions_across: u64,
}

/// Referenced bits over a partition of the shared frame table: clearing
/// one sends an unmap to the owner's agent (not awaited here).
struct SharedBits<'a> {
    slots: &'a mut [Option<OwnedFrame>],
    first: FrameId,
    processes: &'a mut [Process],
    live: &'a [LiveCounters],
}

impl ReferenceBits for SharedBits<'_> {
    fn test_and_clear(&mut self, local: FrameId) -> bool {
        let Some(Some(frame)) = self.slots.get_mut(self.first + local) else {
            return false;
        };
        if !frame.referenced {
            return false;
        }
        frame.referenced = false;
        let process = &mut self.processes[frame.process];
        if let Some(running) = &process.running {
            let drop = Message::Drop {
                page: frame.page,
                ack: false,
            };
            // A process that is gone is noticed by the loop.
            if send(&running.agent, &drop, None).is_ok() {
                process.unacknowledged = true;
            }
        }
        bump(&self.live[frame.process].bits_cleared);
        true
    }
}

impl Handler {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        processes: Vec<Process>,
        frames: Frames,
        replacement: Replacement,
        policy: String,
        swap: Box<dyn SwapBackend>,
        swap_slots: u64,
        live: Arc<Vec<LiveCounters>>,
        page_size: usize,
    ) -> Handler {
        Handler {
            processes,
            frames,
            replacement,
            policy,
            // Every page read back is checked against what was written.
            swap: Verified::new(swap),
            swap_map: SwapMap::new(swap_slots),
            live,
            page_size,
            buffer: Buffer::new(page_size),
            zero_hash: xxhash_rust::xxh3::xxh3_128(&vec![0u8; page_size]),
            evictions_across: 0,
        }
    }

    pub(super) fn serve(mut self, stop: &AtomicBool) -> SharedOutcome {
        for index in 0..self.processes.len() {
            let sent = self.processes[index]
                .running
                .as_ref()
                .map(|r| send(&r.control, &Message::Go, None));
            if let Some(Err(_)) = sent {
                self.end(index);
            }
        }
        let mut faults: Vec<Fault> = Vec::with_capacity(16);
        let mut pollfds: Vec<libc::pollfd> = Vec::new();
        let mut owners: Vec<(usize, bool)> = Vec::new();
        let mut stopping = false;
        loop {
            if stop.load(Ordering::Acquire) && !stopping {
                stopping = true;
                for p in self.processes.iter().filter(|p| p.running.is_some()) {
                    // SAFETY: our own child, not yet reaped.
                    unsafe { libc::kill(p.pid, libc::SIGKILL) };
                }
            }
            pollfds.clear();
            owners.clear();
            for (index, p) in self.processes.iter().enumerate() {
                if let Some(r) = &p.running {
                    for (fd, is_uffd) in [(r.uffd.raw(), true), (r.control.as_raw_fd(), false)] {
                        pollfds.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        owners.push((index, is_uffd));
                    }
                }
            }
            if pollfds.is_empty() {
                break;
            }
            // SAFETY: a live array of pollfds.
            let ready =
                unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, 100) };
            if ready <= 0 {
                continue;
            }
            for (at, pfd) in pollfds.iter().enumerate() {
                if pfd.revents == 0 {
                    continue;
                }
                let (index, is_uffd) = owners[at];
                if is_uffd {
                    self.serve_faults(index, &mut faults);
                } else {
                    self.control(index, 0);
                }
            }
        }
        self.outcome()
    }

    /// Serve process `index`'s pending faults, reading again after each
    /// batch before going back to poll: the fast path of the
    /// single-process pager. The process woken by the last ioctl usually
    /// faults again at once (it shares the CPU), so its next fault is
    /// already queued and a poll over every process would only cost a
    /// system call. At most [`FAULTS_BEFORE_POLL`] faults, so that a
    /// process that keeps faulting does not starve the others.
    fn serve_faults(&mut self, index: usize, faults: &mut Vec<Fault>) {
        let mut served = 0;
        while served < FAULTS_BEFORE_POLL {
            let read = match &self.processes[index].running {
                Some(r) => r.uffd.read_faults(faults),
                None => return,
            };
            if read.is_err() || faults.is_empty() {
                return;
            }
            for &fault in faults.iter() {
                if self.processes[index].running.is_none() {
                    return;
                }
                if let Err(reason) = self.serve_fault(index, fault) {
                    self.fail(index, fault, reason);
                }
                served += 1;
            }
        }
    }

    /// A message from process `index`, or its end.
    fn control(&mut self, index: usize, timeout_ms: i32) {
        let received = match &self.processes[index].running {
            Some(r) => receive(&r.control, timeout_ms),
            None => return,
        };
        match received {
            Ok(Received::Message(Message::Brk { pages }, _)) => self.brk(index, pages),
            Ok(Received::Message(
                Message::Done {
                    accesses,
                    elapsed_ns,
                },
                _,
            )) => {
                let counters = self.live[index].snapshot();
                self.processes[index].done = Some((accesses, elapsed_ns, counters));
                // The process waits for this before its check faults.
                let sent = self.processes[index]
                    .running
                    .as_ref()
                    .map(|r| send(&r.control, &Message::Go, None));
                if let Some(Err(_)) = sent {
                    self.drain_and_end(index);
                }
            }
            Ok(Received::Message(Message::Verdict { ok, text }, _)) => {
                self.processes[index].verdict = Some((ok, text));
            }
            Ok(Received::TimedOut) => {}
            Ok(Received::Message(other, _)) => {
                let p = &mut self.processes[index];
                p.pager_error = Some(format!("process {} sent {other:?}; ended", p.pid));
                self.kill_and_end(index);
            }
            Ok(Received::Closed) | Err(_) => self.end(index),
        }
    }

    /// brk: the heap becomes `pages` pages, up to the process's limit. It
    /// only grows here: a smaller break is refused.
    fn brk(&mut self, index: usize, pages: u64) {
        let p = &mut self.processes[index];
        let refused = if pages > p.spec.heap_limit_pages {
            Some(format!(
                "brk to {pages} pages refused: the heap may grow to {} pages",
                p.spec.heap_limit_pages
            ))
        } else if pages < p.heap_pages {
            Some(format!(
                "brk to {pages} pages refused: the heap only grows (it has {})",
                p.heap_pages
            ))
        } else {
            p.heap_pages = pages;
            p.table.grow_to(p.spec.data_pages + pages);
            None
        };
        let reply = Message::BrkDone {
            pages: p.heap_pages,
            refused,
        };
        let sent = p.running.as_ref().map(|r| send(&r.control, &reply, None));
        if let Some(Err(_)) = sent {
            self.end(index);
        }
    }

    fn serve_fault(&mut self, index: usize, fault: Fault) -> Result<(), FaultError> {
        let page_bytes = self.page_size as u64;
        let p = &self.processes[index];
        let page = fault.address.wrapping_sub(p.base) / page_bytes;
        p.check(page, fault.address)?;
        let addr = p.base + page * page_bytes;
        let live = &self.live[index];
        match p.table.get(page).state {
            PageState::Resident(frame) => {
                let uffd = &p.running.as_ref().ok_or(FaultError::Ended)?.uffd;
                match uffd.continue_(addr, page_bytes) {
                    Ok(()) => {
                        bump(&live.referenced_bit_faults);
                        bump(&live.faults);
                        let was = self.frames.slots[frame].is_some_and(|f| f.referenced);
                        if let Some(f) = self.frames.slots[frame].as_mut() {
                            f.referenced = true;
                        }
                        if !was {
                            self.frames.referenced(frame);
                        }
                        Ok(())
                    }
                    // Mapped meanwhile (an unmap that had not landed yet):
                    // wake the thread, it sees the page.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        uffd.wake(addr, page_bytes).map_err(FaultError::Wake)
                    }
                    Err(source) => Err(FaultError::Install {
                        ioctl: "UFFDIO_CONTINUE",
                        page,
                        source,
                    }),
                }
            }
            PageState::Untouched => {
                let frame = self.obtain_frame(index)?;
                let p = &self.processes[index];
                let uffd = &p.running.as_ref().ok_or(FaultError::Ended)?.uffd;
                if let Err(source) = uffd.zeropage(addr, page_bytes) {
                    self.frames.release(frame);
                    return Err(FaultError::Install {
                        ioctl: "UFFDIO_ZEROPAGE",
                        page,
                        source,
                    });
                }
                bump(&self.live[index].zero_fills);
                bump(&self.live[index].faults);
                self.install(index, page, frame, self.zero_hash);
                Ok(())
            }
            PageState::Swapped(slot) => {
                let frame = self.obtain_frame(index)?;
                if let Err(source) = self.swap.read_page(slot, self.buffer.bytes()) {
                    self.frames.release(frame);
                    return Err(FaultError::SwapIn { page, source });
                }
                // Checked against this hash by the read: no need to hash again.
                let hash = self.swap.written_hash(slot).unwrap_or(0);
                let p = &self.processes[index];
                let uffd = &p.running.as_ref().ok_or(FaultError::Ended)?.uffd;
                if let Err(source) = uffd.copy(addr, self.buffer.ptr, page_bytes) {
                    self.frames.release(frame);
                    return Err(FaultError::Install {
                        ioctl: "UFFDIO_COPY",
                        page,
                        source,
                    });
                }
                bump(&self.live[index].swap_ins);
                bump(&self.live[index].faults);
                self.install(index, page, frame, hash);
                Ok(())
            }
        }
    }

    fn install(&mut self, index: usize, page: u64, frame: FrameId, hash: u128) {
        self.frames.fill(
            frame,
            OwnedFrame {
                process: index,
                page,
                referenced: true,
                loaded_hash: hash,
            },
        );
        self.processes[index].table.entry(page).state = PageState::Resident(frame);
    }

    /// A frame for a fault of process `index`: a free one of its
    /// partition, or its policy's victim, evicted.
    fn obtain_frame(&mut self, index: usize) -> Result<FrameId, FaultError> {
        // A process that ends while we wait on its agent frees frames:
        // then look again (a handful of rounds at most).
        for _ in 0..=self.processes.len() {
            if let Some(frame) = self.frames.take_free(index) {
                return Ok(frame);
            }
            let part = self.frames.partition_of(index);
            let victim = {
                let Frames {
                    slots, partitions, ..
                } = &mut self.frames;
                let partition = &mut partitions[part];
                let mut bits = SharedBits {
                    slots,
                    first: partition.first,
                    processes: &mut self.processes,
                    live: &self.live,
                };
                partition.first + partition.policy.victim(&mut bits)
            };
            let Some(owned) = self.frames.slots[victim] else {
                return Err(FaultError::EmptyFrame(victim));
            };
            // The victim's process (if not this one) must unmap it, and
            // every process with bits cleared must have done so.
            for other in 0..self.processes.len() {
                let unmap = owned.process == other && other != index;
                if unmap || self.processes[other].unacknowledged {
                    let page = if unmap { owned.page } else { NO_PAGE };
                    self.acknowledged(other, page);
                }
            }
            if self.frames.slots[victim] != Some(owned) {
                // Its process ended meanwhile: the frame is free now.
                continue;
            }
            if let Err(e) = self.evict(victim, owned) {
                let part = &mut self.frames.partitions[part];
                part.policy.loaded(victim - part.first, owned.page);
                return Err(e);
            }
            if owned.process != index {
                self.evictions_across += 1;
            }
            return Ok(victim);
        }
        Err(FaultError::NoFrameFreed)
    }

    /// Ask process `index`'s agent to unmap `page` (or nothing) and wait
    /// until it has done that and everything sent before. A process that
    /// does not answer ends.
    fn acknowledged(&mut self, index: usize, page: u64) {
        let p = &mut self.processes[index];
        let Some(running) = &p.running else {
            return;
        };
        p.unacknowledged = false;
        bump(&self.live[index].agent_round_trips);
        let asked = send(&running.agent, &Message::Drop { page, ack: true }, None);
        let answer = match asked {
            Ok(()) => receive(&running.agent, AGENT_TIMEOUT_MS),
            Err(_) => Ok(Received::Closed),
        };
        match answer {
            Ok(Received::Message(Message::Ack, _)) => {}
            // It exited (its work done, or killed): its last words are on
            // the control socket.
            Ok(Received::Closed) => self.drain_and_end(index),
            _ => {
                if p.pager_error.is_none() {
                    p.pager_error = Some(format!(
                        "process {} did not unmap a page when asked (its agent hung): killed",
                        p.pid
                    ));
                }
                self.kill_and_end(index);
            }
        }
    }

    /// Read what process `index` sent before it went, then end it.
    fn drain_and_end(&mut self, index: usize) {
        // Its control socket closes with its exit, in a moment.
        for _ in 0..100 {
            if self.processes[index].running.is_none() {
                return;
            }
            self.control(index, 50);
        }
        self.kill_and_end(index);
    }

    /// Take `owned` (in `frame`, already unmapped from its process) out of
    /// memory, saving it if it changed. The frame is left empty and not
    /// on the free list: the caller fills it.
    fn evict(&mut self, frame: FrameId, owned: OwnedFrame) -> Result<(), FaultError> {
        let page_size = self.page_size;
        let p = &mut self.processes[owned.process];
        let Some(running) = &p.running else {
            return Err(FaultError::VictimEnded);
        };
        let offset = owned.page as usize * page_size;
        // SAFETY: the page is resident and unmapped from its process, so
        // reading it through our own mapping neither faults nor races a
        // write.
        let contents =
            unsafe { std::slice::from_raw_parts(running.own.addr.add(offset), page_size) };
        let changed = xxhash_rust::xxh3::xxh3_128(contents) != owned.loaded_hash;
        let entry = *p.table.entry(owned.page);
        let live = &self.live[owned.process];
        let state = if changed {
            let slot = match entry.slot {
                Some(slot) => slot,
                None => self.swap_map.allocate().ok_or(SwapError::Full {
                    slots: self.swap_map.capacity(),
                    bytes: self.swap_map.capacity() * page_size as u64,
                })?,
            };
            p.table.entry(owned.page).slot = Some(slot);
            self.swap
                .write_page(slot, contents)
                .map_err(|source| FaultError::WriteBack {
                    count: 1,
                    first: owned.page,
                    source,
                })?;
            bump(&live.write_backs);
            PageState::Swapped(slot)
        } else {
            match entry.slot {
                Some(slot) => PageState::Swapped(slot),
                None => PageState::Untouched,
            }
        };
        punch(&running.memfd, offset, page_size).map_err(|source| FaultError::Punch {
            page: owned.page,
            source,
        })?;
        p.table.entry(owned.page).state = state;
        self.frames.slots[frame] = None;
        bump(&live.evictions);
        Ok(())
    }

    /// Answer a fault that cannot be served with SIGBUS, and keep why.
    /// A process that died meanwhile (its ioctls fail) is not blamed:
    /// the loop ends it when it sees its socket closed.
    fn fail(&mut self, index: usize, fault: Fault, reason: FaultError) {
        let p = &mut self.processes[index];
        if p.running.as_ref().is_some_and(|r| hung_up(&r.control)) {
            return;
        }
        bump(&self.live[index].failures);
        let page_start = fault.address & !(self.page_size as u64 - 1);
        if let Some(running) = &p.running {
            let poisoned = running.uffd.has_poison()
                && running
                    .uffd
                    .poison(page_start, self.page_size as u64)
                    .is_ok();
            if !poisoned {
                // SAFETY: signalling a thread of our own child.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        p.pid,
                        fault.thread as libc::pid_t,
                        libc::SIGBUS,
                    )
                };
                let _ = running.uffd.wake(page_start, self.page_size as u64);
            }
        }
        if p.pager_error.is_none() {
            p.pager_error = Some(reason.to_string());
        }
    }

    fn kill_and_end(&mut self, index: usize) {
        if self.processes[index].running.is_some() {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(self.processes[index].pid, libc::SIGKILL) };
        }
        self.end(index);
    }

    /// Process `index` ended (or is ending): give back its frames and
    /// swap slots, close its descriptors and reap it.
    fn end(&mut self, index: usize) {
        let Some(running) = self.processes[index].running.take() else {
            return;
        };
        let freed_frames = self.frames.free_process(index);
        let p = &mut self.processes[index];
        let mut freed_slots = 0;
        for page in 0..p.table.pages() {
            if let Some(slot) = p.table.get(page).slot {
                self.swap_map.release(slot);
                freed_slots += 1;
            }
        }
        p.table_leaves = p.table.leaves();
        p.table = PageTable::new(1);
        p.freed_frames = freed_frames;
        p.freed_slots = freed_slots;
        // Closing the sockets ends a process that is still alive (its
        // agent exits when its socket closes); the memory goes with the
        // last mapping.
        drop(running);
        p.ending = Some(reap(p.pid));
    }

    fn outcome(self) -> SharedOutcome {
        let quotas = (0..self.processes.len())
            .map(|i| self.frames.quota(i))
            .collect();
        let processes = self
            .processes
            .iter()
            .enumerate()
            .map(|(index, p)| ProcessOutcome {
                pid: p.pid,
                ending: p.ending.unwrap_or(Ending::Exited(-1)),
                accesses: p.done.map(|d| d.0),
                elapsed: p.done.map(|d| Duration::from_nanos(d.1)),
                counters_at_done: p.done.map(|d| d.2),
                counters: self.live[index].snapshot(),
                verdict: p.verdict.clone(),
                pager_error: p.pager_error.clone(),
                freed_frames: p.freed_frames,
                freed_slots: p.freed_slots,
                heap_pages: p.heap_pages,
                table_leaves: p.table_leaves,
            })
            .collect();
        SharedOutcome {
            processes,
            frames: self.frames.slots.len(),
            replacement: self.replacement,
            policy: self.policy.clone(),
            quotas,
            evictions_across: self.evictions_across,
            frames_in_use_at_end: self.frames.in_use(),
            slots_in_use_at_end: self.swap_map.in_use(),
            swap: self.swap.describe(),
        }
    }
}

/// Remove one page from a memfd's memory (and from every mapping of it).
fn punch(memfd: &OwnedFd, offset: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: punching a hole in our own memfd.
    let rc = unsafe {
        libc::fallocate(
            memfd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the other end of `socket` is gone (the process exited).
fn hung_up(socket: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd, no waiting.
    let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
    ready > 0 && pfd.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0
}
