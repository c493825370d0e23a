//! Socket mechanics of `net.ack_stall` (the delayed-ACK note): a sender that keeps one
//! segment in flight, like the uIP stack of the delayed-ACK note, against a Linux
//! receiver that delays its ACKs, and the cure, TCP_QUICKACK re-armed after
//! every read.
//!
//! # Method
//!
//! The sender ([`send_one_segment_at_a_time`]) writes one segment, waits until
//! the kernel reports it acknowledged (SIOCOUTQ, the bytes written but not yet
//! acknowledged, drops to 0), and only then writes the next; it records each
//! wait. The receiver ([`receive`]) reads until end of file, either leaving
//! the ACK policy to the kernel ([`AckMode::Delayed`], what netcat did in the
//! seed) or setting TCP_QUICKACK after every read ([`AckMode::QuickAck`], the
//! the delayed-ACK note's cure: the option sends the ACK the kernel was holding back, and the
//! kernel clears it again by itself, so it must be set again after every
//! read). With delayed ACKs every segment waits for the delayed-ACK timer;
//! [`delayed_ack_interval`] extracts that delay from the waits.
//!
//! # What this kernel does (6.18, measured over 127.0.0.1)
//!
//! The delayed-ACK note does not reproduce naively on a current kernel; these are the
//! facts established by experiment, and the set-up they lead to:
//!
//! 1. **A full-sized segment with PSH is acknowledged as soon as the
//!    application reads it.** Recent kernels mark such a segment "pushed"
//!    (tcp_measure_rcv_mss: a segment of exactly one receive MSS with PSH is
//!    taken as the end of an application write whose sender may be waiting
//!    for the ACK), and tcp_cleanup_rbuf sends the ACK when the read drains
//!    the receive queue. uIP sends its data with PSH, and so does a Linux
//!    sender writing one segment per write: measured, a one-segment-at-a-time
//!    sender with PSH gets every ACK within ~0.1 ms, delayed mode or not, no
//!    stall at all. So the delayed-ACK note's exact set-up (uIP into netcat) would not
//!    stall against this kernel. The 2006 receiver ignored PSH for this
//!    decision; to reproduce it the sender here withholds PSH
//!    ([`PushFlag::Clear`], the default): it writes with MSG_MORE (the kernel
//!    then neither sends the partial segment nor marks it PSH) and releases
//!    the segment by clearing TCP_CORK, which pushes it out without PSH. With
//!    that, the stall is there: ~44 ms per segment (below).
//!    [`PushFlag::Set`] keeps PSH, to show what a current kernel does.
//!    One PSH remains: the kernel forces one on the next write once half the
//!    largest window the receiver ever offered has been written since the
//!    last one (forced_push). With the receive buffer of
//!    [`prepare_receiver`] (64 KiB) that is one segment in ~29 of 1460
//!    bytes; that one is acknowledged at once (measured: fast ACKs at
//!    segments 28, 57, 86).
//! 2. **The first ~16 segments are acknowledged at once** (quick-ACK mode at
//!    the start of a connection, TCP_MAX_QUICKACKS = 16): measured, 17 fast
//!    waits, then the stall. This is the delayed-ACK note's "fast start, then a sudden
//!    slowdown".
//! 3. **The delayed-ACK timer fires after 40 ms plus up to one jiffy**
//!    (measured 44 and 48 ms: TCP_DELACK_MIN, rounded up to whole 4 ms
//!    jiffies, CONFIG_HZ=250).
//!    The kernel's estimate (ato) grows to ~200 ms, but the timer is capped
//!    by max(smoothed RTT, 40 ms), and the loopback RTT is tiny; over a path
//!    with a long RTT the delay can grow to 200 ms (TCP_DELACK_MAX), and the
//!    2006 kernel of the delayed-ACK note let it reach 500 ms.
//! 4. **TCP_WINDOW_CLAMP does not hold, and would cure the stall if it
//!    did.** Set on an established socket, the clamp is overwritten by the
//!    first data segment (the kernel re-derives it from the receive buffer
//!    when the first segment changes its MSS estimate: measured, a clamp of
//!    1460 became 83456 after one segment, with or without SO_RCVBUF), and
//!    receive-buffer autotuning raises it again later. Even when it holds
//!    (set after the first segments, with SO_RCVBUF locked), it cannot
//!    withdraw the ~64 KiB window already offered in the handshake: the
//!    window only shrinks as data consumes it (measured: one KiB less per
//!    segment). And a window that really were one segment wide would remove
//!    the stall, by the kernel's own rules: a Linux sender caps its segments
//!    at half the largest window the peer offered (measured, with the clamp
//!    set on the listening socket before the handshake: a 1460-byte write
//!    left in halves of 730 bytes), and two segments unacknowledged are
//!    acknowledged at once; and a read that reopens a closed window sends a
//!    window-update ACK at once (tcp_cleanup_rbuf). Hence one segment in
//!    flight is the sender's rule here, as it was uIP's, and
//!    [`prepare_receiver`] does not clamp the window.
//! 5. **The receive buffer is locked** ([`prepare_receiver`], SO_RCVBUF of
//!    64 KiB or 32 segments): without it, autotuning grows the window during
//!    the run, every growth re-arms one quick ACK and moves the forced-PSH
//!    point; measured, that gives irregular fast ACKs (at segments 28, 46,
//!    77 instead of every 29th). Larger buffers make it worse (1 MiB: 10
//!    extra fast ACKs right after the quick-ACK start), so the buffer stays
//!    small.
//! 6. **Segments of less than ~76 bytes never stall**: the kernel treats a
//!    segment that short as a small pushed one and acknowledges it when read
//!    (measured: 50 bytes, no stall; 80 bytes, stall). [`MIN_SEGMENT`] is
//!    128. A segment larger than the connection's MSS would leave as two
//!    segments, the second acknowledged at once, so it is refused.
//!
//! Measured with this module over loopback (1460-byte segments, runs of
//! 1.5-2 s, four repetitions): delayed ACKs 46-50 kB/s overall (17 fast
//! segments, then one per 44 ms, ~33 kB/s), QUICKACK 38-71 MB/s, a ratio of
//! 800 to 1400; the delayed-ACK interval came out at 44.0 ms every time.
//! With PSH kept ([`PushFlag::Set`]) both modes ran at 24-49 MB/s: no stall.
//! Through `osprobe net ack_stall` (segments of 1000 bytes, 1 s): ratio 635
//! over loopback and 660 over a veth pair into a network namespace, both
//! with a 44 ms interval.
//!
//! # Waiting for the ACK, and what it costs
//!
//! The wait polls SIOCOUTQ: it spins for [`SPIN`] (a QUICKACK answer over
//! loopback comes after ~15 us, median), then sleeps [`POLL_SLEEP`] between
//! polls (a 20 us nanosleep takes ~70 us here, timer slack included), and
//! after [`SHORT_POLL_PHASE`], when the ACK is evidently a delayed one,
//! [`LONG_POLL_SLEEP`]. An ACK is thus seen at most ~0.25 ms late, under 1%
//! of a 40 ms delay. Cost, measured: waiting for delayed ACKs takes ~3% of
//! one CPU (~6,800 polls/s); with the 20 us sleep throughout it took 12%
//! (~14,500 polls/s). In QUICKACK mode the sender is busy by design, 45-65%
//! of a CPU, since an ACK comes back before a sleep would end. The sender
//! reports its CPU time ([`SenderReport::sender_cpu`]) and its polls, so the
//! cost shows in every run.
//!
//! Traps: the wait is bounded ([`ACK_TIMEOUT`] per segment) and checks the
//! socket's error, since after a reset SIOCOUTQ never drops to 0; the sender
//! shuts its write side down at the end, also after an error, so the
//! receiver sees end of file; the stop flag is honoured inside every wait.

use osprobe_core::sys;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Smallest segment accepted: below ~76 bytes of payload the receiving
/// kernel acknowledges every segment as soon as it is read (see the module
/// doc, fact 6), so the experiment would show nothing.
pub const MIN_SEGMENT: usize = 128;

/// Largest segment accepted. It must also fit the connection's MSS, which
/// the sender checks.
pub const MAX_SEGMENT: usize = 16 * 1024;

/// Upper bound on the segments of one run, whatever its duration (a QUICKACK
/// run over loopback writes some tens of thousands per second).
pub const DEFAULT_MAX_SEGMENTS: u64 = 250_000;

/// How long one segment may stay unacknowledged before the sender gives up.
/// No delayed-ACK timer is that long (Linux: 200 ms at most, the 2006 kernel
/// 500 ms); a segment lost on a real path is retransmitted well within it.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the sender polls for the ACK without sleeping.
pub const SPIN: Duration = Duration::from_micros(50);

/// How long the sender sleeps between polls after [`SPIN`], until the wait
/// has lasted [`SHORT_POLL_PHASE`].
pub const POLL_SLEEP: Duration = Duration::from_micros(20);

/// After this much waiting the ACK is a delayed one (tens of milliseconds
/// away), and the sender polls every [`LONG_POLL_SLEEP`].
pub const SHORT_POLL_PHASE: Duration = Duration::from_millis(2);

/// Sleep between polls once the wait has lasted [`SHORT_POLL_PHASE`]: an ACK
/// is seen at most ~0.25 ms late, under 1% of a 40 ms delay.
pub const LONG_POLL_SLEEP: Duration = Duration::from_micros(200);

/// The receive buffer [`prepare_receiver`] sets for segments of up to 2 KiB.
pub const RECEIVE_BUFFER: usize = 64 * 1024;

/// Longest a receiver blocks in one poll before it looks at its stop flag.
const RECEIVE_POLL_SLICE: Duration = Duration::from_millis(20);

/// Size of the receiver's read buffer, netcat-like.
const READ_BUFFER: usize = 64 * 1024;

/// How often the sender checks the socket for an error while waiting.
const ERROR_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// How the receiver acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// The kernel's default: ACKs may be delayed.
    Delayed,
    /// TCP_QUICKACK set after every read, which sends the pending ACK.
    QuickAck,
}

/// Whether the sender's segments carry the PSH flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushFlag {
    /// No PSH (except the kernel's forced one every half window): a current
    /// kernel then delays its ACKs as the delayed-ACK note's receiver did. The default.
    #[default]
    Clear,
    /// PSH on every segment, as uIP sends: a current kernel acknowledges each
    /// as soon as it is read, so there is no stall.
    Set,
}

/// Why [`receive`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiveEnd {
    /// The sender shut its side down.
    Eof,
    /// The deadline passed first.
    Deadline,
    /// The stop flag was set.
    Stopped,
}

/// What the receiver saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverReport {
    pub bytes: u64,
    /// When the first byte was read, from the start of [`receive`].
    pub first_byte: Option<Duration>,
    /// When the last byte was read, from the start of [`receive`].
    pub last_byte: Option<Duration>,
    /// Reads that returned data.
    pub reads: u64,
    pub end: ReceiveEnd,
}

/// What the one-segment-at-a-time sender does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderConfig {
    /// Bytes per segment, [`MIN_SEGMENT`]..=[`MAX_SEGMENT`] and at most the
    /// connection's MSS.
    pub segment: usize,
    /// No segment is written after this much time.
    pub duration: Duration,
    /// No more segments than this.
    pub max_segments: u64,
    pub push: PushFlag,
}

impl SenderConfig {
    /// `segment` bytes at a time for `duration`, PSH withheld.
    pub fn new(segment: usize, duration: Duration) -> Self {
        SenderConfig {
            segment,
            duration,
            max_segments: DEFAULT_MAX_SEGMENTS,
            push: PushFlag::Clear,
        }
    }
}

/// What the sender did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderReport {
    pub bytes: u64,
    pub segments: u64,
    /// From the first write to the acknowledgement of the last segment.
    pub elapsed: Duration,
    /// Per segment, from its write to its acknowledgement (as seen by the
    /// polling, so up to one poll interval late). A segment whose wait the
    /// stop flag cut short is counted in `segments` but has no wait here.
    pub ack_waits: Vec<Duration>,
    /// CPU time the sending thread used during the run: the cost of the
    /// writes and of polling for the ACKs.
    pub sender_cpu: Duration,
    /// SIOCOUTQ polls made while waiting for ACKs.
    pub polls: u64,
    /// The stop flag ended the run early.
    pub stopped: bool,
}

impl SenderReport {
    /// Bytes per second over [`SenderReport::elapsed`], if any time passed.
    pub fn rate(&self) -> Option<f64> {
        let seconds = self.elapsed.as_secs_f64();
        (seconds > 0.0).then(|| self.bytes as f64 / seconds)
    }
}

/// Prepare the receiving socket, before data flows: check `segment` and lock
/// the receive buffer (SO_RCVBUF of [`RECEIVE_BUFFER`], or 32 segments if
/// that is more) so that autotuning does not grow the window during the run.
///
/// The window is deliberately not clamped to one segment (TCP_WINDOW_CLAMP):
/// on this kernel the clamp is overwritten by the first data segment, it
/// cannot withdraw the window offered in the handshake, and a window that
/// really were one segment wide would make the kernel acknowledge at once
/// (module doc, fact 4). The sender keeps one segment in flight itself.
pub fn prepare_receiver(stream: &TcpStream, segment: usize) -> io::Result<()> {
    check_segment(segment)?;
    let buffer = receive_buffer_for(segment);
    let buffer = libc::c_int::try_from(buffer).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("receive buffer of {buffer} bytes does not fit a socket option"),
        )
    })?;
    set_int_option(
        stream.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        buffer,
        "SO_RCVBUF on the receiving socket",
    )
}

/// The receive buffer [`prepare_receiver`] asks for: [`RECEIVE_BUFFER`], or
/// 32 segments for larger segments, so that the kernel's forced PSH (every
/// half window) stays rare.
pub fn receive_buffer_for(segment: usize) -> usize {
    segment.saturating_mul(32).max(RECEIVE_BUFFER)
}

/// Read from `stream` until end of file, `deadline` or `stop`, acknowledging
/// as `mode` says. With [`AckMode::QuickAck`], TCP_QUICKACK is set after
/// every read that returned data: that sends the ACK the kernel was holding,
/// and the kernel clears the option again by itself.
pub fn receive(
    stream: &TcpStream,
    mode: AckMode,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<ReceiverReport> {
    let start = Instant::now();
    let fd = stream.as_raw_fd();
    let mut reader: &TcpStream = stream;
    let mut buffer = vec![0u8; READ_BUFFER];
    let mut report = ReceiverReport {
        bytes: 0,
        first_byte: None,
        last_byte: None,
        reads: 0,
        end: ReceiveEnd::Deadline,
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            report.end = ReceiveEnd::Stopped;
            return Ok(report);
        }
        let now = Instant::now();
        if now >= deadline {
            report.end = ReceiveEnd::Deadline;
            return Ok(report);
        }
        let slice = (deadline - now).min(RECEIVE_POLL_SLICE);
        if !wait_readable(fd, slice)? {
            continue;
        }
        let count = match reader.read(&mut buffer) {
            Ok(count) => count,
            Err(err)
                if err.kind() == io::ErrorKind::Interrupted
                    || err.kind() == io::ErrorKind::WouldBlock =>
            {
                continue
            }
            Err(err) => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("reading the ack-stall stream: {err}"),
                ))
            }
        };
        if count == 0 {
            report.end = ReceiveEnd::Eof;
            return Ok(report);
        }
        let at = start.elapsed();
        report.first_byte.get_or_insert(at);
        report.last_byte = Some(at);
        report.bytes += count as u64;
        report.reads += 1;
        if mode == AckMode::QuickAck {
            set_int_option(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                1,
                "TCP_QUICKACK on the receiving socket",
            )?;
        }
    }
}

/// Emulate uIP: write one segment of `segment` bytes, wait until it is
/// acknowledged, write the next; for `duration` at most (and at most
/// [`DEFAULT_MAX_SEGMENTS`]), PSH withheld (module doc, fact 1). Shuts the
/// write side down at the end so the receiver sees end of file.
pub fn send_one_segment_at_a_time(
    stream: &TcpStream,
    segment: usize,
    duration: Duration,
    stop: &AtomicBool,
) -> io::Result<SenderReport> {
    send_segments(stream, &SenderConfig::new(segment, duration), stop)
}

/// [`send_one_segment_at_a_time`] with every choice explicit.
pub fn send_segments(
    stream: &TcpStream,
    config: &SenderConfig,
    stop: &AtomicBool,
) -> io::Result<SenderReport> {
    let result = run_sender(stream, config, stop);
    // The receiver waits for end of file; give it one even after an error.
    let shutdown = stream.shutdown(Shutdown::Write);
    let report = result?;
    shutdown.map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("shutting down the sending side of the ack-stall stream: {err}"),
        )
    })?;
    Ok(report)
}

fn run_sender(
    stream: &TcpStream,
    config: &SenderConfig,
    stop: &AtomicBool,
) -> io::Result<SenderReport> {
    check_segment(config.segment)?;
    let fd = stream.as_raw_fd();
    let mss = get_int_option(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_MAXSEG,
        "TCP_MAXSEG of the sending socket",
    )?;
    check_segment_fits_mss(config.segment, mss)?;
    stream.set_nodelay(true).map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("setting TCP_NODELAY on the sending socket: {err}"),
        )
    })?;
    let mut waiter = AckWaiter::new(stream);
    // Whatever the connection carried before must be acknowledged first, or
    // the first wait would include it.
    if waiter.wait(Instant::now() + ACK_TIMEOUT, stop)?.is_none() {
        return Ok(SenderReport {
            bytes: 0,
            segments: 0,
            elapsed: Duration::ZERO,
            ack_waits: Vec::new(),
            sender_cpu: Duration::ZERO,
            polls: waiter.polls,
            stopped: true,
        });
    }
    waiter.polls = 0;

    let payload = vec![0x5a_u8; config.segment];
    let capacity = usize::try_from(config.max_segments.min(4096)).unwrap_or(4096);
    let mut report = SenderReport {
        bytes: 0,
        segments: 0,
        elapsed: Duration::ZERO,
        ack_waits: Vec::with_capacity(capacity),
        sender_cpu: Duration::ZERO,
        polls: 0,
        stopped: false,
    };
    let cpu_start = sys::thread_cpu_time();
    let start = Instant::now();
    let end_of_writes = start + config.duration;
    while report.segments < config.max_segments {
        if stop.load(Ordering::Relaxed) {
            report.stopped = true;
            break;
        }
        let written_at = Instant::now();
        if written_at >= end_of_writes {
            break;
        }
        write_segment(fd, &payload, config.push, written_at + ACK_TIMEOUT)?;
        report.segments += 1;
        report.bytes += config.segment as u64;
        match waiter.wait(written_at + ACK_TIMEOUT, stop)? {
            Some(acked_at) => report.ack_waits.push(acked_at - written_at),
            None => {
                report.stopped = true;
                break;
            }
        }
    }
    report.elapsed = start.elapsed();
    report.sender_cpu = sys::thread_cpu_time().saturating_sub(cpu_start);
    report.polls = waiter.polls;
    Ok(report)
}

/// The typical delay of a delayed ACK among `ack_waits`, or `None` if the
/// waits show no delayed ACKs.
///
/// The waits of a delayed-ACK run are two clusters: fast ACKs (~0.1 ms: the
/// quick-ACK start, forced-PSH segments) and delayed ones (40-48 ms here,
/// up to 200-500 ms elsewhere), orders of magnitude apart. A plain median
/// would land in the fast cluster whenever it is the larger one (short runs:
/// 17 fast waits before the stall). So: sort the waits and split them at
/// the largest ratio between neighbours, among splits that leave at least 3
/// waits and 5% of them above (a few scheduling hiccups in a QUICKACK run
/// must not pass for delayed ACKs) and whose upper side starts at 1 ms or
/// more: the delayed cluster cannot start below the shortest timer, and
/// ratios inside the fast cluster can be large (1 µs next to 30 µs is 30x,
/// larger than a 0.5 ms -> 5 ms gap); if that ratio is at least 8 the upper
/// cluster is taken, otherwise all waits are one cluster. The answer is the
/// median of that cluster, robust against the jiffy rounding of the timer
/// (40, 44, 48 ms). A median under 1 ms is no delayed-ACK timer (the
/// shortest is one jiffy), so then the answer is `None`.
pub fn delayed_ack_interval(ack_waits: &[Duration]) -> Option<Duration> {
    const GAP_RATIO: f64 = 8.0;
    const MIN_CLUSTER: usize = 3;
    const MIN_CLUSTER_FRACTION: f64 = 0.05;
    const SHORTEST_TIMER: Duration = Duration::from_millis(1);
    // Ratios against a zero wait are infinite; a microsecond floor keeps
    // them finite without changing which gap is largest in practice.
    const FLOOR: Duration = Duration::from_micros(1);

    if ack_waits.is_empty() {
        return None;
    }
    let mut waits = ack_waits.to_vec();
    waits.sort_unstable();
    let count = waits.len();
    let min_upper = MIN_CLUSTER.max((count as f64 * MIN_CLUSTER_FRACTION).ceil() as usize);

    let mut best_split: Option<(f64, usize)> = None;
    for split in 1..count {
        if count - split < min_upper {
            break;
        }
        if waits[split] < SHORTEST_TIMER {
            continue;
        }
        let below = waits[split - 1].max(FLOOR).as_secs_f64();
        let above = waits[split].as_secs_f64();
        let ratio = above / below;
        if best_split.is_none_or(|(best, _)| ratio > best) {
            best_split = Some((ratio, split));
        }
    }
    let cluster = match best_split {
        Some((ratio, split)) if ratio >= GAP_RATIO => &waits[split..],
        _ => &waits[..],
    };
    let typical = median_of_sorted(cluster);
    (typical >= SHORTEST_TIMER).then_some(typical)
}

/// Median of a sorted, non-empty slice (the mean of the two middle values
/// for an even count).
fn median_of_sorted(sorted: &[Duration]) -> Duration {
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2
    }
}

fn check_segment(segment: usize) -> io::Result<()> {
    if (MIN_SEGMENT..=MAX_SEGMENT).contains(&segment) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "ack-stall segment of {segment} bytes is outside the accepted range \
                 {MIN_SEGMENT}..={MAX_SEGMENT} bytes"
            ),
        ))
    }
}

/// A segment larger than the MSS would leave as two segments, and the
/// receiver acknowledges two segments at once.
fn check_segment_fits_mss(segment: usize, mss: libc::c_int) -> io::Result<()> {
    match usize::try_from(mss) {
        Ok(mss) if segment <= mss => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "ack-stall segment of {segment} bytes exceeds the connection's MSS of {mss} \
                 bytes; a segment must fit one TCP segment (at most the MSS)"
            ),
        )),
    }
}

/// Write one segment so that it leaves at once; with [`PushFlag::Clear`]
/// without PSH: MSG_MORE keeps the kernel from marking (and from sending) the
/// partial segment, and clearing TCP_CORK then pushes it out unmarked
/// (TCP_NODELAY is set, so nothing holds it back).
fn write_segment(fd: RawFd, payload: &[u8], push: PushFlag, give_up_at: Instant) -> io::Result<()> {
    let flags = match push {
        PushFlag::Clear => libc::MSG_MORE | libc::MSG_NOSIGNAL,
        PushFlag::Set => libc::MSG_NOSIGNAL,
    };
    let mut sent = 0;
    while sent < payload.len() {
        let rest = &payload[sent..];
        // SAFETY: `rest` is a live, initialised buffer of `rest.len()` bytes
        // for the duration of the call; `fd` is the caller's open socket.
        let result = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), flags) };
        if result >= 0 {
            // `result` is non-negative and at most `rest.len()`.
            sent += result as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            // A non-blocking socket whose send buffer is full: wait for room.
            io::ErrorKind::WouldBlock => {
                if Instant::now() >= give_up_at {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the send buffer of the ack-stall stream stayed full",
                    ));
                }
                wait_writable(fd, Duration::from_millis(10))?;
            }
            _ => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("writing a segment to the ack-stall stream: {err}"),
                ))
            }
        }
    }
    if push == PushFlag::Clear {
        set_int_option(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            0,
            "TCP_CORK (release of a segment) on the sending socket",
        )?;
    }
    Ok(())
}

/// Polls SIOCOUTQ until everything written is acknowledged.
struct AckWaiter<'a> {
    stream: &'a TcpStream,
    polls: u64,
}

impl<'a> AckWaiter<'a> {
    fn new(stream: &'a TcpStream) -> Self {
        AckWaiter { stream, polls: 0 }
    }

    /// The instant the acknowledgement was seen, or `None` if `stop` was
    /// set first. Fails at `give_up_at` or on a socket error.
    fn wait(&mut self, give_up_at: Instant, stop: &AtomicBool) -> io::Result<Option<Instant>> {
        let fd = self.stream.as_raw_fd();
        let started = Instant::now();
        let mut next_error_check = started + ERROR_CHECK_INTERVAL;
        loop {
            self.polls += 1;
            if unacknowledged_bytes(fd)? == 0 {
                return Ok(Some(Instant::now()));
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let now = Instant::now();
            if now >= next_error_check {
                next_error_check = now + ERROR_CHECK_INTERVAL;
                // After a reset SIOCOUTQ never reaches 0; the error says why.
                if let Some(err) = self.stream.take_error()? {
                    return Err(io::Error::new(
                        err.kind(),
                        format!("the ack-stall stream failed while waiting for an ACK: {err}"),
                    ));
                }
            }
            if now >= give_up_at {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "a segment stayed unacknowledged for {} ms (limit {} ms)",
                        (now - started).as_millis(),
                        ACK_TIMEOUT.as_millis()
                    ),
                ));
            }
            let waited = now - started;
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < SHORT_POLL_PHASE {
                std::thread::sleep(POLL_SLEEP);
            } else {
                std::thread::sleep(LONG_POLL_SLEEP);
            }
        }
    }
}

/// Bytes written to the socket and not yet acknowledged (SIOCOUTQ).
fn unacknowledged_bytes(fd: RawFd) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (= SIOCOUTQ on a TCP socket) writes one c_int through
    // the pointer, which points to a live local.
    let result = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut value as *mut libc::c_int) };
    if result < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("SIOCOUTQ on the sending socket: {err}"),
        ));
    }
    Ok(value)
}

/// Wait up to `timeout` for `fd` to become readable (or to report end of
/// file or an error, which the following read returns); false on timeout
/// or when a signal interrupted the wait (the caller looks at its stop
/// flag and waits again).
fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    sys::poll_one(fd, libc::POLLIN, timeout).map_err(poll_error)
}

fn wait_writable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    sys::poll_one(fd, libc::POLLOUT, timeout).map_err(poll_error)
}

fn poll_error(err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("poll on the ack-stall stream: {err}"))
}

/// [`sys::set_int`], with the option named in the error.
fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
    what: &str,
) -> io::Result<()> {
    sys::set_int(fd, level, name, value)
        .map_err(|err| io::Error::new(err.kind(), format!("setting {what} to {value}: {err}")))
}

/// [`sys::get_int`], with the option named in the error.
fn get_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    what: &str,
) -> io::Result<libc::c_int> {
    sys::get_int(fd, level, name)
        .map_err(|err| io::Error::new(err.kind(), format!("reading {what}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::Arc;

    fn ms(value: f64) -> Duration {
        Duration::from_secs_f64(value / 1000.0)
    }

    fn us(value: u64) -> Duration {
        Duration::from_micros(value)
    }

    /// A connected pair over 127.0.0.1: (sending side, receiving side).
    fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("listener address");
        let sender = TcpStream::connect(address).expect("connect over loopback");
        let (receiver, _) = listener.accept().expect("accept over loopback");
        (sender, receiver)
    }

    /// One run: the receiver in a thread, the sender here.
    fn run_pair(
        segment: usize,
        duration: Duration,
        mode: AckMode,
        config: impl FnOnce(SenderConfig) -> SenderConfig,
    ) -> (SenderReport, ReceiverReport) {
        let (sender, receiver) = loopback_pair();
        prepare_receiver(&receiver, segment).expect("prepare receiver");
        let stop = Arc::new(AtomicBool::new(false));
        let receiver_stop = Arc::clone(&stop);
        let deadline = Instant::now() + duration + Duration::from_secs(5);
        let receiving = std::thread::spawn(move || {
            receive(&receiver, mode, deadline, &receiver_stop).expect("receive")
        });
        let config = config(SenderConfig::new(segment, duration));
        let sent = send_segments(&sender, &config, &stop).expect("send");
        let received = receiving.join().expect("receiver thread");
        (sent, received)
    }

    #[test]
    fn interval_of_a_delayed_run_is_the_upper_cluster() {
        // 17 quick ACKs at the start, then the stall with jiffy rounding.
        let mut waits: Vec<Duration> = (0..17).map(|i| us(40 + i * 3)).collect();
        for i in 0..30 {
            waits.push(ms([44.0, 44.0, 48.0][i % 3]));
        }
        waits.push(us(90)); // one forced-PSH segment
        assert_eq!(delayed_ack_interval(&waits), Some(ms(44.0)));
    }

    #[test]
    fn interval_ignores_a_larger_fast_cluster() {
        // More fast than slow waits: a plain median would say 0.1 ms.
        let mut waits = vec![us(100); 40];
        waits.extend([ms(40.0), ms(40.0), ms(44.0), ms(44.0), ms(48.0)]);
        assert_eq!(delayed_ack_interval(&waits), Some(ms(44.0)));
    }

    #[test]
    fn interval_of_only_delayed_waits_is_their_median() {
        let waits = [ms(40.0), ms(44.0), ms(44.0), ms(48.0)];
        assert_eq!(delayed_ack_interval(&waits), Some(ms(44.0)));
    }

    #[test]
    fn interval_is_none_without_delayed_acks() {
        assert_eq!(delayed_ack_interval(&[]), None);
        // A QUICKACK run: fast waits, two scheduling hiccups.
        let mut waits: Vec<Duration> = (0..2000).map(|i| us(30 + i % 50)).collect();
        waits.extend([ms(3.0), ms(12.0)]);
        assert_eq!(delayed_ack_interval(&waits), None);
        // Two fast clusters far apart are still no delayed-ACK timer.
        let mut waits = vec![us(10); 50];
        waits.extend(vec![us(200); 50]);
        assert_eq!(delayed_ack_interval(&waits), None);
        // Zero waits do not divide by zero.
        assert_eq!(delayed_ack_interval(&[Duration::ZERO; 10]), None);
    }

    #[test]
    fn interval_ignores_large_ratios_inside_the_fast_cluster() {
        // The case proptest shrank in CI: a 1 µs wait beside 30 µs ones is a
        // 30x ratio, larger than the 10x between the slowest fast wait and
        // the 5 ms timer.
        let mut waits = vec![us(30); 26];
        waits.extend([us(489), us(1)]);
        waits.extend(vec![ms(5.0); 10]);
        assert_eq!(delayed_ack_interval(&waits), Some(ms(5.0)));
    }

    #[test]
    fn interval_of_a_200_ms_timer() {
        let mut waits = vec![us(80); 16];
        waits.extend(vec![ms(200.0); 9]);
        waits.extend(vec![ms(204.0); 2]);
        assert_eq!(delayed_ack_interval(&waits), Some(ms(200.0)));
    }

    proptest::proptest! {
        #[test]
        fn interval_finds_any_delay_behind_any_fast_start(
            fast in proptest::collection::vec(1u64..500, 0..60),
            delay_ms in 5.0f64..500.0,
            jitter in proptest::collection::vec(-0.1f64..0.1, 10..80),
        ) {
            let mut waits: Vec<Duration> = fast.iter().map(|&v| us(v)).collect();
            waits.extend(jitter.iter().map(|j| ms(delay_ms * (1.0 + j))));
            let found = delayed_ack_interval(&waits).expect("a delayed cluster");
            let found_ms = found.as_secs_f64() * 1000.0;
            proptest::prop_assert!(
                (found_ms - delay_ms).abs() <= delay_ms * 0.1 + 1e-6,
                "found {found_ms} ms for a delay of {delay_ms} ms"
            );
        }
    }

    #[test]
    fn segment_sizes_outside_the_range_are_refused() {
        let (sender, receiver) = loopback_pair();
        let stop = AtomicBool::new(false);
        for segment in [0, MIN_SEGMENT - 1, MAX_SEGMENT + 1] {
            let err = prepare_receiver(&receiver, segment).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().contains(&segment.to_string()), "{err}");
        }
        let err =
            send_one_segment_at_a_time(&sender, 0, Duration::from_millis(10), &stop).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn segment_larger_than_the_mss_is_refused() {
        assert!(check_segment_fits_mss(1448, 1448).is_ok());
        let err = check_segment_fits_mss(1460, 1448).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("1448"), "{err}");
        assert!(check_segment_fits_mss(1460, -1).is_err());
    }

    #[test]
    fn receive_buffer_grows_with_large_segments_only() {
        assert_eq!(receive_buffer_for(1460), RECEIVE_BUFFER);
        assert_eq!(receive_buffer_for(MAX_SEGMENT), 32 * MAX_SEGMENT);
    }

    #[test]
    fn delayed_acks_stall_the_sender_and_quickack_cures_it() {
        let segment = 1460;
        let (delayed, delayed_received) = run_pair(
            segment,
            Duration::from_millis(1000),
            AckMode::Delayed,
            |c| c,
        );
        let (quick, quick_received) = run_pair(
            segment,
            Duration::from_millis(300),
            AckMode::QuickAck,
            |c| c,
        );

        for (sent, received) in [(&delayed, &delayed_received), (&quick, &quick_received)] {
            assert_eq!(received.end, ReceiveEnd::Eof);
            assert_eq!(received.bytes, sent.bytes);
            assert_eq!(sent.ack_waits.len() as u64, sent.segments);
            assert!(!sent.stopped);
        }
        let delayed_rate = delayed.rate().expect("delayed run took time");
        let quick_rate = quick.rate().expect("quickack run took time");
        assert!(
            quick_rate > 10.0 * delayed_rate,
            "quickack {quick_rate:.0} B/s vs delayed {delayed_rate:.0} B/s"
        );
        let interval = delayed_ack_interval(&delayed.ack_waits).expect("delayed ACKs seen");
        assert!(
            interval >= Duration::from_millis(10) && interval <= Duration::from_millis(600),
            "delayed-ACK interval {interval:?}"
        );
    }

    #[test]
    fn sender_stops_at_the_segment_limit() {
        let (sent, received) = run_pair(512, Duration::from_secs(5), AckMode::QuickAck, |config| {
            SenderConfig {
                max_segments: 5,
                ..config
            }
        });
        assert_eq!(sent.segments, 5);
        assert_eq!(sent.bytes, 5 * 512);
        assert_eq!(sent.ack_waits.len(), 5);
        assert_eq!(received.bytes, 5 * 512);
        assert_eq!(received.end, ReceiveEnd::Eof);
    }

    #[test]
    fn sender_honours_the_stop_flag() {
        let (sender, receiver) = loopback_pair();
        let stop = AtomicBool::new(true);
        let report =
            send_one_segment_at_a_time(&sender, 1460, Duration::from_secs(5), &stop).expect("send");
        assert!(report.stopped);
        assert_eq!(report.segments, 0);
        // The write side was shut down: the receiver sees end of file.
        let never = AtomicBool::new(false);
        let received = receive(
            &receiver,
            AckMode::Delayed,
            Instant::now() + Duration::from_secs(5),
            &never,
        )
        .expect("receive");
        assert_eq!(received.end, ReceiveEnd::Eof);
        assert_eq!(received.bytes, 0);
    }

    #[test]
    fn receiver_returns_at_end_of_file() {
        let (mut sender, receiver) = loopback_pair();
        sender.write_all(&[7u8; 10_000]).expect("write");
        sender.shutdown(Shutdown::Write).expect("shutdown");
        let stop = AtomicBool::new(false);
        let report = receive(
            &receiver,
            AckMode::QuickAck,
            Instant::now() + Duration::from_secs(5),
            &stop,
        )
        .expect("receive");
        assert_eq!(report.end, ReceiveEnd::Eof);
        assert_eq!(report.bytes, 10_000);
        assert!(report.reads >= 1);
        let (first, last) = (report.first_byte.unwrap(), report.last_byte.unwrap());
        assert!(first <= last);
    }

    #[test]
    fn receiver_returns_at_the_deadline() {
        let (_sender, receiver) = loopback_pair();
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_millis(150);
        let report = receive(&receiver, AckMode::Delayed, deadline, &stop).expect("receive");
        assert_eq!(report.end, ReceiveEnd::Deadline);
        assert!(Instant::now() >= deadline);
        assert_eq!(report.bytes, 0);
        assert_eq!(report.first_byte, None);
    }

    #[test]
    fn receiver_returns_when_stopped() {
        let (_sender, receiver) = loopback_pair();
        let stop = Arc::new(AtomicBool::new(false));
        let setter = Arc::clone(&stop);
        let stopping = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            setter.store(true, Ordering::Relaxed);
        });
        let report = receive(
            &receiver,
            AckMode::Delayed,
            Instant::now() + Duration::from_secs(30),
            &stop,
        )
        .expect("receive");
        stopping.join().expect("stopping thread");
        assert_eq!(report.end, ReceiveEnd::Stopped);
    }
}
