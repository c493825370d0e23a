//! The forwarder of one direction: read packets from one TUN device, decide
//! each one's fate and release time ([`crate::impairment`]), and write it to
//! the other TUN device when it is due.
//!
//! # Timing
//!
//! Release times never decrease (the link keeps order), so pending packets
//! wait in a FIFO and only its head matters: no heap or wheel is needed.
//! The thread sleeps in ppoll(2) on the input device with a nanosecond
//! timeout that ends a margin before the head is due (timer slack set to
//! 1 ns for this thread, so the kernel does not round the wake-up up by
//! its default 50 us), then spins on CLOCK_MONOTONIC for the rest: the
//! hybrid of the BBR talk. The margin adapts: a vCPU woken from idle can be
//! 30-100 us late on a VM, more than the configured `spin`, so the thread
//! measures how late each timed wake-up is, keeps a slowly decaying maximum
//! of that, and spins for that much plus [`WAKE_GUARD_NS`] (never less than
//! `spin`, never more than [`MAX_MARGIN_NS`]). The cost is CPU: at most one
//! margin of spinning per release. While spinning it keeps reading arrivals (a
//! non-blocking read of an empty device costs well under a microsecond),
//! so arrivals are time-stamped within microseconds even then; it stops
//! reading a few microseconds before the deadline so that a large read
//! cannot make the release late. The release error (clock just before
//! write(2) minus due time) is recorded for every packet.
//!
//! The threads run under SCHED_FIFO at the lowest real-time priority when
//! allowed (LinkConfig::realtime): a normal thread woken while a sender or
//! receiver keeps the CPU busy waits up to a scheduler slice, which put the
//! p99 release error in the milliseconds on a loaded 2-vCPU machine; as a
//! real-time thread it preempts them at once (p99 ~10 us there).
//!
//! # Throughput
//!
//! - Offloads: the kernel's TCP hands over up to 64 KB per read (see
//!   [`crate::segment`]); without impairments that need wire-sized packets
//!   it is written on whole, so one pair of system calls moves ~44
//!   segments. With loss but no rate or trace, each segment is judged on
//!   its own (loss is per wire packet) and the survivors are written as
//!   runs of consecutive segments, one GSO packet each: 1% loss costs
//!   about 1.4 writes per 64 KB instead of 44.
//! - Batching: after a wake-up the thread drains up to [`READ_BATCH`]
//!   packets before sleeping again, and releases everything due in one go.
//! - No copies on the fast path: a packet due at once (no delay, nothing
//!   queued ahead) is written straight from the read buffer; a delayed
//!   large packet keeps its buffer (a fresh one takes its place from a
//!   pool), a small one is copied into a small pooled buffer, so memory
//!   held follows the bytes queued rather than 64 KB per packet.
//! - Pending bytes are capped ([`MAX_PENDING_BYTES`]); beyond that packets
//!   are dropped and counted as queue drops, so no configuration can
//!   exhaust memory.

use crate::histogram::LogHistogram;
use crate::impairment::{Impairments, Verdict};
use crate::segment::{self, VnetHeader, VNET_HDR_LEN};
use crate::tun;
use osprobe_core::clock::monotonic_ns;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Packets read per wake-up before the loop looks at its clock again.
pub const READ_BATCH: usize = 64;
/// The most bytes (buffer capacity) one direction may hold.
pub const MAX_PENDING_BYTES: usize = 256 << 20;
/// The longest a thread sleeps before checking whether to stop.
const MAX_SLEEP_NS: u64 = 10_000_000;
/// No reads this close to a deadline: a 64 KB read takes several us.
const READ_GUARD_NS: u64 = 5_000;
/// Spin this much beyond the lateness of recent wake-ups.
pub const WAKE_GUARD_NS: u64 = 10_000;
/// The longest the adaptive margin may grow (a rare very late wake-up must
/// not make the thread spin for milliseconds per packet).
pub const MAX_MARGIN_NS: u64 = 300_000;
/// Buffer size for one read: a 64 KB GSO packet, its virtio-net header.
const LARGE: usize = 65_536 + 256 + VNET_HDR_LEN;
/// Packets up to this size are copied into a small buffer when queued.
const SMALL: usize = 2_048;
const POOL_LARGE: usize = 64;
const POOL_SMALL: usize = 8_192;

/// Live counters of one direction, in wire packets and IP bytes (a GSO
/// packet counts as the segments it stands for).
#[derive(Debug, Default)]
pub struct Counters {
    pub packets_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub packets_out: AtomicU64,
    pub bytes_out: AtomicU64,
    pub dropped_loss: AtomicU64,
    pub dropped_queue: AtomicU64,
    pub dropped_error: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What a forwarder thread returns when it stops.
#[derive(Debug)]
pub struct ForwarderResult {
    pub release_error: LogHistogram,
    pub queueing_delay: LogHistogram,
    /// Wire packets still waiting when the link stopped (discarded).
    pub left_pending: u64,
    /// The error that ended the thread early, if any.
    pub error: Option<String>,
    /// Whether the thread ran under SCHED_FIFO, or why it could not.
    pub realtime: Result<bool, FifoRefused>,
    /// CPU time the thread used (user + system, including the write(2)s
    /// that hand packets to the kernel): near the run's length, the
    /// forwarder is what bounds the link.
    pub cpu_ns: u64,
}

impl Default for ForwarderResult {
    fn default() -> Self {
        ForwarderResult {
            release_error: LogHistogram::new(),
            queueing_delay: LogHistogram::new(),
            left_pending: 0,
            error: None,
            realtime: Ok(false),
            cpu_ns: 0,
        }
    }
}

/// Move the calling thread to SCHED_FIFO at the lowest real-time priority:
/// above every normal thread, below anything that chose a real-time
/// priority on purpose.
fn enter_fifo() -> Result<bool, FifoRefused> {
    // musl's sched_param has more fields than glibc's (the sporadic
    // server's): start from zero and set the one that matters.
    // SAFETY: sched_param is plain integers; all zeros is a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 1;
    // SAFETY: pthread_self is always valid; `param` lives for the call.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    match rc {
        0 => Ok(true),
        libc::EPERM => Err(FifoRefused::NotPermitted),
        rc => Err(FifoRefused::Other(Arc::new(
            std::io::Error::from_raw_os_error(rc),
        ))),
    }
}

/// Why the forwarder thread runs at normal priority: the link still works,
/// with more release error under load.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FifoRefused {
    /// EPERM: the process has no CAP_SYS_NICE and no RLIMIT_RTPRIO
    /// allowance (or, root in a cgroup, no real-time budget).
    #[error("no CAP_SYS_NICE (nor an RLIMIT_RTPRIO allowance): SCHED_FIFO refused")]
    NotPermitted,
    /// Any other refusal (shared, because a report is cloned).
    #[error("SCHED_FIFO refused: {0}")]
    Other(#[source] Arc<std::io::Error>),
}

struct Pending {
    due_ns: u64,
    buf: Vec<u8>,
    packets: u64,
    bytes: u64,
}

/// Reusable packet buffers of two sizes.
struct Pool {
    large: Vec<Vec<u8>>,
    small: Vec<Vec<u8>>,
}

impl Pool {
    fn take_large(&mut self) -> Vec<u8> {
        self.large
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(LARGE))
    }

    fn take_small(&mut self) -> Vec<u8> {
        self.small
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(SMALL))
    }

    fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() >= LARGE {
            if self.large.len() < POOL_LARGE {
                self.large.push(buf);
            }
        } else if buf.capacity() >= SMALL && self.small.len() < POOL_SMALL {
            self.small.push(buf);
        }
    }
}

/// Everything one direction's thread owns.
pub struct Forwarder {
    pub input: Arc<OwnedFd>,
    pub output: Arc<OwnedFd>,
    pub impairments: Impairments,
    /// Cut GSO packets into wire packets (loss, rate or trace configured).
    pub segment: bool,
    /// Without a rate or trace, judge each wire packet of a GSO packet but
    /// write the survivors as runs (see [`Running::arrive_gso_runs`]).
    pub coalesce: bool,
    /// The devices carry virtio-net headers.
    pub vnet: bool,
    pub spin_ns: u64,
    /// Run under SCHED_FIFO (see [`crate::emulator::LinkConfig::realtime`]).
    pub realtime: bool,
    pub counters: Arc<Counters>,
    pub stop: Arc<AtomicBool>,
}

/// The state of a running forwarder.
struct Running {
    input: RawFd,
    output: RawFd,
    impairments: Impairments,
    segment: bool,
    coalesce: bool,
    vnet: bool,
    counters: Arc<Counters>,
    /// Per segment of the GSO packet being judged: its due time, or None
    /// when lost (reused between packets).
    verdicts: Vec<Option<u64>>,
    kept: Vec<bool>,
    pending: VecDeque<Pending>,
    pending_capacity: usize,
    pool: Pool,
    scratch: Vec<u8>,
    /// Decaying maximum of how late timed wake-ups were, in ns.
    wake_late_ns: u64,
    result: ForwarderResult,
}

impl Forwarder {
    /// Run until `stop` is set or a device fails.
    pub fn run(self) -> ForwarderResult {
        // SAFETY: PR_SET_TIMERSLACK takes an integer; it affects only this
        // thread's timers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let mut state = Running {
            input: self.input.as_raw_fd(),
            output: self.output.as_raw_fd(),
            impairments: self.impairments,
            segment: self.segment,
            coalesce: self.coalesce,
            vnet: self.vnet,
            verdicts: Vec::new(),
            kept: Vec::new(),
            counters: self.counters,
            pending: VecDeque::new(),
            pending_capacity: 0,
            pool: Pool {
                large: Vec::new(),
                small: Vec::new(),
            },
            scratch: Vec::with_capacity(SMALL),
            wake_late_ns: 0,
            result: ForwarderResult::default(),
        };
        if self.realtime {
            state.result.realtime = enter_fifo();
        }
        let mut read_buf = Vec::with_capacity(LARGE);
        if let Err(e) = state.forward(&mut read_buf, self.spin_ns, &self.stop) {
            state.result.error = Some(e.to_string());
        }
        state.result.left_pending = state.pending.iter().map(|p| p.packets).sum();
        state.result.cpu_ns = osprobe_core::sys::thread_cpu_time().as_nanos() as u64;
        state.result
    }
}

impl Running {
    fn forward(
        &mut self,
        read_buf: &mut Vec<u8>,
        spin_ns: u64,
        stop: &AtomicBool,
    ) -> std::io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.release_due();
            let mut got = 0;
            while got < READ_BATCH && !self.head_is_due() {
                if !tun::read_packet(self.input, read_buf)? {
                    break;
                }
                self.arrive(read_buf, monotonic_ns());
                got += 1;
            }
            if got > 0 {
                continue;
            }
            let now = monotonic_ns();
            let margin = self.margin(spin_ns);
            match self.pending.front().map(|p| p.due_ns) {
                Some(due) if due <= now => {}
                Some(due) if due - now <= margin => self.spin_until(due, read_buf)?,
                Some(due) => self.sleep(now, (due - margin - now).min(MAX_SLEEP_NS))?,
                None => self.sleep(now, MAX_SLEEP_NS)?,
            }
        }
        Ok(())
    }

    /// How long before a release to stop sleeping and spin.
    fn margin(&self, spin_ns: u64) -> u64 {
        (self.wake_late_ns + WAKE_GUARD_NS).clamp(spin_ns, MAX_MARGIN_NS.max(spin_ns))
    }

    /// Sleep until input arrives or `timeout_ns` has passed; learn how late
    /// a timed-out sleep woke.
    fn sleep(&mut self, now: u64, timeout_ns: u64) -> std::io::Result<()> {
        if tun::wait_readable(self.input, timeout_ns)? {
            return Ok(());
        }
        let late = monotonic_ns().saturating_sub(now + timeout_ns);
        // Decay by 1/64 per wake-up: one outlier is forgotten after a few
        // hundred sleeps.
        self.wake_late_ns = late.max(self.wake_late_ns - self.wake_late_ns / 64);
        Ok(())
    }

    fn head_is_due(&self) -> bool {
        self.pending
            .front()
            .is_some_and(|p| p.due_ns <= monotonic_ns())
    }

    /// Spin until `due`, reading arrivals while there is time.
    fn spin_until(&mut self, due: u64, read_buf: &mut Vec<u8>) -> std::io::Result<()> {
        loop {
            let now = monotonic_ns();
            if now >= due {
                return Ok(());
            }
            if due - now > READ_GUARD_NS && tun::read_packet(self.input, read_buf)? {
                self.arrive(read_buf, monotonic_ns());
                continue;
            }
            std::hint::spin_loop();
        }
    }

    /// Write every pending packet that is due.
    fn release_due(&mut self) {
        while let Some(head) = self.pending.front() {
            let now = monotonic_ns();
            if head.due_ns > now {
                return;
            }
            let p = self.pending.pop_front().expect("front exists");
            self.pending_capacity -= p.buf.capacity();
            self.release(&p.buf, p.due_ns, now, p.packets, p.bytes);
            self.pool.give(p.buf);
        }
    }

    fn release(&mut self, packet: &[u8], due_ns: u64, now: u64, packets: u64, bytes: u64) {
        self.result.release_error.record(now.saturating_sub(due_ns));
        match tun::write_packet(self.output, packet) {
            Ok(()) => {
                add(&self.counters.packets_out, packets);
                add(&self.counters.bytes_out, bytes);
            }
            Err(_) => add(&self.counters.dropped_error, packets),
        }
    }

    /// A packet was read at `arrival_ns`.
    fn arrive(&mut self, read_buf: &mut Vec<u8>, arrival_ns: u64) {
        let (header, ip_offset) = if self.vnet {
            match VnetHeader::parse(read_buf) {
                Some(h) => (h, VNET_HDR_LEN),
                None => {
                    add(&self.counters.dropped_error, 1);
                    return;
                }
            }
        } else {
            (VnetHeader::default(), 0)
        };
        let (packets, bytes) = segment::wire_size(&header, &read_buf[ip_offset..]);
        add(&self.counters.packets_in, packets);
        add(&self.counters.bytes_in, bytes);
        if self.segment
            && self.coalesce
            && header.is_gso()
            && self.arrive_gso_runs(read_buf, arrival_ns)
        {
            return;
        }
        if self.segment && header.is_gso() {
            let mut scratch = std::mem::take(&mut self.scratch);
            let cut = segment::segment_tcp4(read_buf, &mut scratch, |seg| {
                self.admit(seg, arrival_ns, 1, (seg.len() - VNET_HDR_LEN) as u64);
            });
            self.scratch = scratch;
            if cut.is_ok() {
                return;
            }
        }
        self.admit_read_buffer(read_buf, arrival_ns, packets, bytes);
    }

    /// Loss (and delay) without a bottleneck: every wire segment of a GSO
    /// packet is judged on its own, as the wire would (loss is per
    /// segment), but the survivors are written as runs of consecutive
    /// segments, each one GSO packet: one write(2) per run instead of one
    /// per segment, which is what lets a lossy long fat pipe run at the
    /// speed of a loss-free one. A run is released when its last segment
    /// is due (with jitter the earlier ones wait a few microseconds more;
    /// order is kept). False: not a GSO TCP/IPv4 packet, handled otherwise.
    fn arrive_gso_runs(&mut self, read_buf: &mut Vec<u8>, arrival_ns: u64) -> bool {
        let Ok(gso) = segment::GsoTcp4::parse(read_buf) else {
            return false;
        };
        let n = gso.segments();
        let mut verdicts = std::mem::take(&mut self.verdicts);
        let mut kept = std::mem::take(&mut self.kept);
        verdicts.clear();
        kept.clear();
        for i in 0..n {
            let due = self
                .judge(arrival_ns, 1, gso.ip_bytes(i, 1))
                .map(|(due, _)| due);
            verdicts.push(due);
            kept.push(due.is_some());
        }
        if kept.iter().all(|&k| k) {
            let due = verdicts[n - 1].expect("kept");
            let bytes = gso.ip_bytes(0, n);
            self.deliver_read_buffer(read_buf, due, n as u64, bytes);
        } else {
            let mut scratch = std::mem::take(&mut self.scratch);
            for (first, count) in segment::runs(&kept) {
                let due = verdicts[first + count - 1].expect("kept");
                gso.run(first, count, &mut scratch);
                self.deliver(&scratch, due, count as u64, gso.ip_bytes(first, count));
            }
            self.scratch = scratch;
        }
        self.verdicts = verdicts;
        self.kept = kept;
        true
    }

    fn admit_read_buffer(
        &mut self,
        read_buf: &mut Vec<u8>,
        arrival_ns: u64,
        packets: u64,
        bytes: u64,
    ) {
        let Some((due, sojourn)) = self.judge(arrival_ns, packets, bytes) else {
            return;
        };
        self.record_sojourn(sojourn);
        self.deliver_read_buffer(read_buf, due, packets, bytes);
    }

    /// Release or queue the packet in the read buffer, due at `due`.
    fn deliver_read_buffer(&mut self, read_buf: &mut Vec<u8>, due: u64, packets: u64, bytes: u64) {
        if read_buf.len() <= SMALL {
            self.deliver(read_buf, due, packets, bytes);
            return;
        }
        // A large packet that must wait keeps its buffer; the reader gets
        // a fresh one (see the module documentation).
        if self.pending.is_empty() && due <= monotonic_ns() {
            self.release(read_buf, due, monotonic_ns(), packets, bytes);
        } else {
            let fresh = self.pool.take_large();
            let owned = std::mem::replace(read_buf, fresh);
            self.enqueue(owned, due, packets, bytes);
        }
    }

    /// Admit a small packet (or a segment), copying it if it must wait.
    fn admit(&mut self, packet: &[u8], arrival_ns: u64, packets: u64, bytes: u64) {
        let Some((due, sojourn)) = self.judge(arrival_ns, packets, bytes) else {
            return;
        };
        self.record_sojourn(sojourn);
        self.deliver(packet, due, packets, bytes);
    }

    /// Release `packet` now if it is due and nothing waits ahead of it,
    /// else queue a copy.
    fn deliver(&mut self, packet: &[u8], due: u64, packets: u64, bytes: u64) {
        if self.pending.is_empty() && due <= monotonic_ns() {
            self.release(packet, due, monotonic_ns(), packets, bytes);
            return;
        }
        let mut buf = if packet.len() <= SMALL {
            self.pool.take_small()
        } else {
            self.pool.take_large()
        };
        buf.clear();
        buf.extend_from_slice(packet);
        self.enqueue(buf, due, packets, bytes);
    }

    /// The impairments' verdict, counted: Some((due, sojourn)) to deliver.
    fn judge(&mut self, arrival_ns: u64, packets: u64, bytes: u64) -> Option<(u64, Option<u64>)> {
        match self.impairments.admit(arrival_ns, bytes) {
            Verdict::Lost => {
                add(&self.counters.dropped_loss, packets);
                None
            }
            Verdict::QueueFull => {
                add(&self.counters.dropped_queue, packets);
                None
            }
            Verdict::Deliver { due_ns, sojourn_ns } => Some((due_ns, sojourn_ns)),
        }
    }

    fn record_sojourn(&mut self, sojourn: Option<u64>) {
        if let Some(s) = sojourn {
            self.result.queueing_delay.record(s);
        }
    }

    fn enqueue(&mut self, buf: Vec<u8>, due_ns: u64, packets: u64, bytes: u64) {
        if self.pending_capacity + buf.capacity() > MAX_PENDING_BYTES {
            add(&self.counters.dropped_queue, packets);
            self.pool.give(buf);
            return;
        }
        self.pending_capacity += buf.capacity();
        self.pending.push_back(Pending {
            due_ns,
            buf,
            packets,
            bytes,
        });
    }
}
