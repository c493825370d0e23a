//! TCP_INFO and the socket-buffer and congestion-control knobs around it.
//!
//! Method: `getsockopt(fd, IPPROTO_TCP, TCP_INFO)` copies the kernel's
//! `struct tcp_info` (include/uapi/linux/tcp.h) into `RawTcpInfo`, our own
//! `#[repr(C)]` mirror of it, and [`TcpInfo`] turns that into named fields in
//! stated units (microseconds, bytes, bytes per second, segments).
//!
//! Traps, and how this module handles them:
//! - The struct only ever grows at its end. An older kernel copies fewer bytes
//!   and says how many in `optlen`; a newer kernel copies only as many as we
//!   ask for. Every field that was not part of the original 104-byte struct is
//!   an `Option` in [`TcpInfo`], `None` when the kernel's answer ended before
//!   it (the Linux version that added each is in its doc). Fields that are
//!   zero because the kernel supplied zero stay `Some(0)`. Answers shorter
//!   than the 104-byte base are refused with an error.
//! - Two bytes are C bitfields (`tcpi_snd_wscale:4, tcpi_rcv_wscale:4` and
//!   `tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2`); the
//!   compiler places bitfields from the low bit on little-endian targets and
//!   from the high bit on big-endian ones, so they are decoded per endianness.
//! - `tcpi_busy_time`, `tcpi_rwnd_limited` and `tcpi_sndbuf_limited` (the
//!   kernel's "chrono" statistics) are kept in jiffies and reported in
//!   microseconds: their resolution is one tick (1 to 10 ms), so they say
//!   little about transfers shorter than a few ticks. `tcpi_busy_time` is the
//!   total of all three states, so the other two are fractions of it.
//! - `snd_cwnd` is in segments, not bytes; multiply by `snd_mss`.
//! - `snd_ssthresh` is [`TCP_INFINITE_SSTHRESH`] until the first loss or ECN
//!   mark: the connection has never left slow start.
//! - `pacing_rate`/`max_pacing_rate` are `u64::MAX` when no rate is set.
//! - `SO_SNDBUF`/`SO_RCVBUF` read back twice what `setsockopt` asked for: the
//!   kernel doubles the request to leave room for its own bookkeeping
//!   (socket(7)), and it counts that overhead against the buffer, so only
//!   about half of [`send_buffer`] holds payload.
//! - The `/proc/sys/net` files show the network namespace of the thread that
//!   opens them, so [`tcp_mem_sysctls`] and [`available_congestion_controls`]
//!   describe the calling thread's namespace, not necessarily the peer's.

use std::io;
use std::mem::{offset_of, size_of, size_of_val};
use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

/// `TCP_ESTABLISHED` from include/net/tcp_states.h: the value of
/// [`TcpInfo::state`] on an open connection.
pub const TCP_STATE_ESTABLISHED: u8 = 1;

/// The value of `snd_ssthresh` before the first congestion event
/// (`TCP_INFINITE_SSTHRESH` in include/net/tcp.h).
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// Longest congestion-control name the kernel accepts, without the NUL
/// (`TCP_CA_NAME_MAX` is 16 including it).
pub const CONGESTION_NAME_MAX: usize = 15;

/// Congestion controls the kernel has loaded (root may set any of them, and
/// may also name a not-yet-loaded module such as `bbr` to load it).
pub const AVAILABLE_CC_PATH: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// Congestion controls an unprivileged process may set.
pub const ALLOWED_CC_PATH: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// `min default max` bytes of a TCP socket's send buffer (autotuning range).
pub const TCP_WMEM_PATH: &str = "/proc/sys/net/ipv4/tcp_wmem";
/// `min default max` bytes of a TCP socket's receive buffer (autotuning range).
pub const TCP_RMEM_PATH: &str = "/proc/sys/net/ipv4/tcp_rmem";

/// Size of the base `struct tcp_info` every kernel since 2.6 returns.
const BASE_LEN: usize = offset_of!(RawTcpInfo, tcpi_pacing_rate);

/// Byte-for-byte mirror of Linux's `struct tcp_info` up to
/// `tcpi_total_rto_time` (Linux 6.7, 248 bytes). Newer kernels have more
/// fields after it; they copy only what we ask for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawTcpInfo {
    tcpi_state: u8,
    tcpi_ca_state: u8,
    tcpi_retransmits: u8,
    tcpi_probes: u8,
    tcpi_backoff: u8,
    tcpi_options: u8,
    /// Bitfields `tcpi_snd_wscale:4, tcpi_rcv_wscale:4`.
    tcpi_wscale_bits: u8,
    /// Bitfields `tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2`.
    tcpi_app_limited_bits: u8,

    tcpi_rto: u32,
    tcpi_ato: u32,
    tcpi_snd_mss: u32,
    tcpi_rcv_mss: u32,

    tcpi_unacked: u32,
    tcpi_sacked: u32,
    tcpi_lost: u32,
    tcpi_retrans: u32,
    tcpi_fackets: u32,

    tcpi_last_data_sent: u32,
    tcpi_last_ack_sent: u32,
    tcpi_last_data_recv: u32,
    tcpi_last_ack_recv: u32,

    tcpi_pmtu: u32,
    tcpi_rcv_ssthresh: u32,
    tcpi_rtt: u32,
    tcpi_rttvar: u32,
    tcpi_snd_ssthresh: u32,
    tcpi_snd_cwnd: u32,
    tcpi_advmss: u32,
    tcpi_reordering: u32,

    tcpi_rcv_rtt: u32,
    tcpi_rcv_space: u32,

    tcpi_total_retrans: u32,

    // Linux 3.15
    tcpi_pacing_rate: u64,
    tcpi_max_pacing_rate: u64,
    // Linux 4.1
    tcpi_bytes_acked: u64,
    tcpi_bytes_received: u64,
    // Linux 4.2
    tcpi_segs_out: u32,
    tcpi_segs_in: u32,
    // Linux 4.6
    tcpi_notsent_bytes: u32,
    tcpi_min_rtt: u32,
    tcpi_data_segs_in: u32,
    tcpi_data_segs_out: u32,
    // Linux 4.9
    tcpi_delivery_rate: u64,
    // Linux 4.10
    tcpi_busy_time: u64,
    tcpi_rwnd_limited: u64,
    tcpi_sndbuf_limited: u64,
    // Linux 4.18
    tcpi_delivered: u32,
    tcpi_delivered_ce: u32,
    // Linux 4.19
    tcpi_bytes_sent: u64,
    tcpi_bytes_retrans: u64,
    tcpi_dsack_dups: u32,
    tcpi_reord_seen: u32,
    // Linux 5.4
    tcpi_rcv_ooopack: u32,
    tcpi_snd_wnd: u32,
    // Linux 6.2
    tcpi_rcv_wnd: u32,
    tcpi_rehash: u32,
    // Linux 6.7
    tcpi_total_rto: u16,
    tcpi_total_rto_recoveries: u16,
    tcpi_total_rto_time: u32,
}

// The mirror must match the kernel's layout exactly; these offsets are the
// ones of include/uapi/linux/tcp.h on every Linux architecture.
const _: () = {
    assert!(offset_of!(RawTcpInfo, tcpi_rto) == 8);
    assert!(offset_of!(RawTcpInfo, tcpi_total_retrans) == 100);
    assert!(offset_of!(RawTcpInfo, tcpi_pacing_rate) == 104);
    assert!(offset_of!(RawTcpInfo, tcpi_bytes_acked) == 120);
    assert!(offset_of!(RawTcpInfo, tcpi_segs_out) == 136);
    assert!(offset_of!(RawTcpInfo, tcpi_notsent_bytes) == 144);
    assert!(offset_of!(RawTcpInfo, tcpi_delivery_rate) == 160);
    assert!(offset_of!(RawTcpInfo, tcpi_busy_time) == 168);
    assert!(offset_of!(RawTcpInfo, tcpi_delivered) == 192);
    assert!(offset_of!(RawTcpInfo, tcpi_bytes_sent) == 200);
    assert!(offset_of!(RawTcpInfo, tcpi_rcv_ooopack) == 224);
    assert!(offset_of!(RawTcpInfo, tcpi_snd_wnd) == 228);
    assert!(offset_of!(RawTcpInfo, tcpi_rcv_wnd) == 232);
    assert!(offset_of!(RawTcpInfo, tcpi_total_rto) == 240);
    assert!(offset_of!(RawTcpInfo, tcpi_total_rto_time) == 244);
    assert!(size_of::<RawTcpInfo>() == 248);
};

/// One connection's TCP_INFO in named fields and plain units.
///
/// Fields without `Option` are in every kernel's answer. An `Option` field is
/// `None` when the kernel's answer ended before it (an older kernel; the
/// version that added it is given) and `Some` with the kernel's value,
/// possibly zero, otherwise. [`TcpInfo::default`] is all zeros and `None`s,
/// useful for building test inputs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct TcpInfo {
    /// How many bytes of `struct tcp_info` the kernel filled in (at most 248,
    /// the size this module knows).
    pub kernel_len: u32,
    /// Connection state (include/net/tcp_states.h): 1 is ESTABLISHED, see
    /// [`TcpInfo::state_name`].
    pub state: u8,
    /// Congestion-avoidance state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery,
    /// 4 Loss; see [`TcpInfo::ca_state_name`].
    pub ca_state: u8,
    /// Retransmissions of the current RTO back-off (not a total).
    pub retransmits: u8,
    /// Unanswered zero-window probes.
    pub probes: u8,
    /// Exponential back-off count of the retransmission timer.
    pub backoff: u8,
    /// Negotiated options, bits TCPI_OPT_TIMESTAMPS 1, SACK 2, WSCALE 4,
    /// ECN 8, ECN_SEEN 16, SYN_DATA 32.
    pub options: u8,
    /// Send window-scale shift.
    pub snd_wscale: u8,
    /// Receive window-scale shift.
    pub rcv_wscale: u8,
    /// Whether the latest delivery-rate sample was taken while the
    /// application, not the network, limited sending. False on kernels
    /// before 4.9 (where `delivery_rate` is `None`).
    pub delivery_rate_app_limited: bool,
    /// Retransmission timeout, microseconds.
    pub rto_us: u32,
    /// Delayed-ACK timeout, microseconds.
    pub ato_us: u32,
    /// Sender maximum segment size, bytes.
    pub snd_mss: u32,
    /// Receiver's estimate of the peer's segment size, bytes.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged (in flight, roughly).
    pub unacked: u32,
    /// Segments selectively acknowledged (SACKed).
    pub sacked: u32,
    /// Segments currently marked lost.
    pub lost: u32,
    /// Segments currently retransmitted and unacknowledged.
    pub retrans: u32,
    /// Milliseconds since data was last sent.
    pub last_data_sent_ms: u32,
    /// Milliseconds since data was last received.
    pub last_data_recv_ms: u32,
    /// Milliseconds since an ACK was last received.
    pub last_ack_recv_ms: u32,
    /// Path MTU, bytes.
    pub pmtu: u32,
    /// Current receive-window clamp, bytes.
    pub rcv_ssthresh: u32,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Round-trip time variation, microseconds.
    pub rttvar_us: u32,
    /// Slow-start threshold, segments ([`TCP_INFINITE_SSTHRESH`] before the
    /// first congestion event).
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Advertised MSS, bytes.
    pub advmss: u32,
    /// Reordering tolerance, segments.
    pub reordering: u32,
    /// Receiver-side RTT estimate, microseconds (0 if never measured).
    pub rcv_rtt_us: u32,
    /// Receive-buffer autotuning's estimate of what the application reads
    /// per round trip, bytes.
    pub rcv_space: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Pacing rate, bytes/s (`u64::MAX`: none). Linux 3.15.
    pub pacing_rate: Option<u64>,
    /// Pacing-rate cap from SO_MAX_PACING_RATE, bytes/s (`u64::MAX`: none).
    /// Linux 3.15.
    pub max_pacing_rate: Option<u64>,
    /// Data bytes acknowledged by the peer. Linux 4.1.
    pub bytes_acked: Option<u64>,
    /// Data bytes received in order. Linux 4.1.
    pub bytes_received: Option<u64>,
    /// Segments sent, including pure ACKs and retransmissions. Linux 4.2.
    pub segs_out: Option<u32>,
    /// Segments received. Linux 4.2.
    pub segs_in: Option<u32>,
    /// Bytes written by the application and not yet sent. Linux 4.6.
    pub notsent_bytes: Option<u32>,
    /// Minimum RTT seen (windowed), microseconds. Linux 4.6.
    pub min_rtt_us: Option<u32>,
    /// Segments received carrying data. Linux 4.6.
    pub data_segs_in: Option<u32>,
    /// Segments sent carrying data, retransmissions included. Linux 4.6.
    pub data_segs_out: Option<u32>,
    /// Latest delivery-rate sample, bytes/s. Linux 4.9.
    pub delivery_rate: Option<u64>,
    /// Time with data to send (busy plus both limited states), microseconds,
    /// jiffy resolution. Linux 4.10.
    pub busy_time_us: Option<u64>,
    /// Part of `busy_time_us` stalled by the peer's receive window. Linux 4.10.
    pub rwnd_limited_us: Option<u64>,
    /// Part of `busy_time_us` stalled by our send buffer. Linux 4.10.
    pub sndbuf_limited_us: Option<u64>,
    /// Segments delivered (acknowledged), retransmissions counted once.
    /// Linux 4.18.
    pub delivered: Option<u32>,
    /// Delivered segments that carried an ECN CE mark. Linux 4.18.
    pub delivered_ce: Option<u32>,
    /// Data bytes sent, retransmissions included. Linux 4.19.
    pub bytes_sent: Option<u64>,
    /// Data bytes retransmitted. Linux 4.19.
    pub bytes_retrans: Option<u64>,
    /// Duplicate segments reported by DSACK (spurious retransmissions).
    /// Linux 4.19.
    pub dsack_dups: Option<u32>,
    /// Reordering events seen. Linux 4.19.
    pub reord_seen: Option<u32>,
    /// Out-of-order segments received. Linux 5.4.
    pub rcv_ooopack: Option<u32>,
    /// Peer's advertised receive window after scaling, bytes. Linux 5.4.
    pub snd_wnd: Option<u32>,
    /// Our advertised receive window after scaling, bytes. Linux 6.2.
    pub rcv_wnd: Option<u32>,
    /// Path rehash attempts (PLB or timeouts). Linux 6.2.
    pub rehash: Option<u32>,
    /// Retransmission timeouts, SYN timeouts included. Linux 6.7.
    pub total_rto: Option<u16>,
    /// Recoveries from retransmission timeouts. Linux 6.7.
    pub total_rto_recoveries: Option<u16>,
    /// Time spent recovering from timeouts, milliseconds. Linux 6.7.
    pub total_rto_time_ms: Option<u32>,
}

impl TcpInfo {
    /// Whether the connection is ESTABLISHED.
    pub fn is_established(&self) -> bool {
        self.state == TCP_STATE_ESTABLISHED
    }

    /// The kernel's name of [`TcpInfo::state`] (`"ESTABLISHED"`, ...), or
    /// `"UNKNOWN"` for a value this module does not know.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "ESTABLISHED",
            2 => "SYN_SENT",
            3 => "SYN_RECV",
            4 => "FIN_WAIT1",
            5 => "FIN_WAIT2",
            6 => "TIME_WAIT",
            7 => "CLOSE",
            8 => "CLOSE_WAIT",
            9 => "LAST_ACK",
            10 => "LISTEN",
            11 => "CLOSING",
            12 => "NEW_SYN_RECV",
            _ => "UNKNOWN",
        }
    }

    /// The name of [`TcpInfo::ca_state`] (`"Open"`, `"Disorder"`, `"CWR"`,
    /// `"Recovery"`, `"Loss"`), or `"Unknown"`.
    pub fn ca_state_name(&self) -> &'static str {
        match self.ca_state {
            0 => "Open",
            1 => "Disorder",
            2 => "CWR",
            3 => "Recovery",
            4 => "Loss",
            _ => "Unknown",
        }
    }

    /// Build from the kernel's answer: `raw` of which the first `len` bytes
    /// were written by the kernel.
    fn from_raw(raw: &RawTcpInfo, len: usize) -> TcpInfo {
        // A field is present when the kernel's answer reaches its last byte.
        macro_rules! supplied {
            ($field:ident) => {{
                let end = offset_of!(RawTcpInfo, $field) + size_of_val(&raw.$field);
                (len >= end).then_some(raw.$field)
            }};
        }
        let (snd_wscale, rcv_wscale) = split_wscale(raw.tcpi_wscale_bits);
        let delivery_rate = supplied!(tcpi_delivery_rate);
        TcpInfo {
            kernel_len: u32::try_from(len).unwrap_or(u32::MAX),
            state: raw.tcpi_state,
            ca_state: raw.tcpi_ca_state,
            retransmits: raw.tcpi_retransmits,
            probes: raw.tcpi_probes,
            backoff: raw.tcpi_backoff,
            options: raw.tcpi_options,
            snd_wscale,
            rcv_wscale,
            // Before 4.9 this byte was padding; only trust it with the rate.
            delivery_rate_app_limited: delivery_rate.is_some()
                && app_limited_bit(raw.tcpi_app_limited_bits),
            rto_us: raw.tcpi_rto,
            ato_us: raw.tcpi_ato,
            snd_mss: raw.tcpi_snd_mss,
            rcv_mss: raw.tcpi_rcv_mss,
            unacked: raw.tcpi_unacked,
            sacked: raw.tcpi_sacked,
            lost: raw.tcpi_lost,
            retrans: raw.tcpi_retrans,
            last_data_sent_ms: raw.tcpi_last_data_sent,
            last_data_recv_ms: raw.tcpi_last_data_recv,
            last_ack_recv_ms: raw.tcpi_last_ack_recv,
            pmtu: raw.tcpi_pmtu,
            rcv_ssthresh: raw.tcpi_rcv_ssthresh,
            rtt_us: raw.tcpi_rtt,
            rttvar_us: raw.tcpi_rttvar,
            snd_ssthresh: raw.tcpi_snd_ssthresh,
            snd_cwnd: raw.tcpi_snd_cwnd,
            advmss: raw.tcpi_advmss,
            reordering: raw.tcpi_reordering,
            rcv_rtt_us: raw.tcpi_rcv_rtt,
            rcv_space: raw.tcpi_rcv_space,
            total_retrans: raw.tcpi_total_retrans,
            pacing_rate: supplied!(tcpi_pacing_rate),
            max_pacing_rate: supplied!(tcpi_max_pacing_rate),
            bytes_acked: supplied!(tcpi_bytes_acked),
            bytes_received: supplied!(tcpi_bytes_received),
            segs_out: supplied!(tcpi_segs_out),
            segs_in: supplied!(tcpi_segs_in),
            notsent_bytes: supplied!(tcpi_notsent_bytes),
            min_rtt_us: supplied!(tcpi_min_rtt),
            data_segs_in: supplied!(tcpi_data_segs_in),
            data_segs_out: supplied!(tcpi_data_segs_out),
            delivery_rate,
            busy_time_us: supplied!(tcpi_busy_time),
            rwnd_limited_us: supplied!(tcpi_rwnd_limited),
            sndbuf_limited_us: supplied!(tcpi_sndbuf_limited),
            delivered: supplied!(tcpi_delivered),
            delivered_ce: supplied!(tcpi_delivered_ce),
            bytes_sent: supplied!(tcpi_bytes_sent),
            bytes_retrans: supplied!(tcpi_bytes_retrans),
            dsack_dups: supplied!(tcpi_dsack_dups),
            reord_seen: supplied!(tcpi_reord_seen),
            rcv_ooopack: supplied!(tcpi_rcv_ooopack),
            snd_wnd: supplied!(tcpi_snd_wnd),
            rcv_wnd: supplied!(tcpi_rcv_wnd),
            rehash: supplied!(tcpi_rehash),
            total_rto: supplied!(tcpi_total_rto),
            total_rto_recoveries: supplied!(tcpi_total_rto_recoveries),
            total_rto_time_ms: supplied!(tcpi_total_rto_time),
        }
    }
}

/// Split the `tcpi_snd_wscale:4, tcpi_rcv_wscale:4` byte into (snd, rcv).
fn split_wscale(bits: u8) -> (u8, u8) {
    if cfg!(target_endian = "little") {
        (bits & 0x0f, bits >> 4)
    } else {
        (bits >> 4, bits & 0x0f)
    }
}

/// The `tcpi_delivery_rate_app_limited:1` bit: the first bitfield of its
/// byte, so the lowest bit on little-endian and the highest on big-endian.
fn app_limited_bit(bits: u8) -> bool {
    if cfg!(target_endian = "little") {
        bits & 0x01 != 0
    } else {
        bits & 0x80 != 0
    }
}

/// An `io::Error` of the same kind as `err`, with `what` in front.
fn with_context(err: io::Error, what: String) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

/// The TCP_INFO of the TCP socket `fd`.
///
/// Fields the running kernel does not supply are `None` (see [`TcpInfo`]).
/// Errors: `fd` is not a socket, or not a TCP socket (the message names the
/// fd), or the kernel answered with fewer than the 104 bytes of the base
/// struct (`InvalidData`).
pub fn tcp_info(fd: RawFd) -> io::Result<TcpInfo> {
    let mut raw = RawTcpInfo::default();
    let mut len = size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: `raw` is a repr(C) struct of plain integers, valid for writes
    // of `len` bytes; the kernel writes at most `len` bytes into it and
    // stores the count it wrote in `len`. A bad fd only yields an error.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut RawTcpInfo).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(with_context(
            io::Error::last_os_error(),
            format!("getsockopt(TCP_INFO) on fd {fd} (a TCP socket is needed)"),
        ));
    }
    let len = len as usize;
    if len < BASE_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "getsockopt(TCP_INFO) on fd {fd} returned {len} bytes; \
                 at least {BASE_LEN} (the Linux 2.6 struct tcp_info) expected"
            ),
        ));
    }
    Ok(TcpInfo::from_raw(&raw, len.min(size_of::<RawTcpInfo>())))
}

/// The congestion control of socket `fd` (`"cubic"`, `"bbr"`, ...), from
/// `getsockopt(TCP_CONGESTION)`.
pub fn congestion_control(fd: RawFd) -> io::Result<String> {
    let mut name = [0u8; CONGESTION_NAME_MAX + 1];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: `name` is a byte buffer valid for writes of `len` bytes; the
    // kernel writes at most `len` bytes and stores the count in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(with_context(
            io::Error::last_os_error(),
            format!("getsockopt(TCP_CONGESTION) on fd {fd} (a TCP socket is needed)"),
        ));
    }
    let filled = &name[..(len as usize).min(name.len())];
    // The kernel pads the name with NULs to its buffer's length.
    let end = filled.iter().position(|&b| b == 0).unwrap_or(filled.len());
    Ok(String::from_utf8_lossy(&filled[..end]).into_owned())
}

/// Set the congestion control of socket `fd` (`setsockopt(TCP_CONGESTION)`).
///
/// `name` must be 1 to 15 bytes without NUL. The kernel accepts any name in
/// [`available_congestion_controls`]; a process with CAP_NET_ADMIN may also
/// name an unloaded module (`bbr` loads `tcp_bbr`), other processes only
/// names in [`allowed_congestion_controls`]. The error names the input and
/// lists what this machine offers.
pub fn set_congestion_control(fd: RawFd, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() > CONGESTION_NAME_MAX || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "congestion control name {name:?}: 1 to {CONGESTION_NAME_MAX} bytes without NUL \
                 expected (available: {})",
                available_congestion_controls().join(" ")
            ),
        ));
    }
    // SAFETY: `name` is valid for reads of `name.len()` bytes; the kernel
    // copies at most that many and does not keep the pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast::<libc::c_void>(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        let hint = match err.raw_os_error() {
            Some(libc::ENOENT) => format!(
                "not available (available: {})",
                available_congestion_controls().join(" ")
            ),
            Some(libc::EPERM) => format!(
                "not allowed without CAP_NET_ADMIN (allowed: {})",
                allowed_congestion_controls().join(" ")
            ),
            _ => "failed".to_string(),
        };
        return Err(with_context(
            err,
            format!("setting congestion control {name:?} on fd {fd}: {hint}"),
        ));
    }
    Ok(())
}

/// Congestion controls loaded in this network namespace, from
/// `/proc/sys/net/ipv4/tcp_available_congestion_control`; empty when the
/// file cannot be read. A privileged process may also set unloaded ones that
/// exist as modules.
pub fn available_congestion_controls() -> Vec<String> {
    read_name_list(AVAILABLE_CC_PATH)
}

/// Congestion controls a process without CAP_NET_ADMIN may set, from
/// `/proc/sys/net/ipv4/tcp_allowed_congestion_control`; empty when the file
/// cannot be read.
pub fn allowed_congestion_controls() -> Vec<String> {
    read_name_list(ALLOWED_CC_PATH)
}

fn read_name_list(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| parse_name_list(&text))
        .unwrap_or_default()
}

/// Split a whitespace-separated sysctl list (`"reno cubic bbr\n"`) into names.
pub fn parse_name_list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Read an integer socket option at `SOL_SOCKET` level.
fn socket_int_option(fd: RawFd, option: libc::c_int, option_name: &str) -> io::Result<u64> {
    let value = osprobe_core::sys::get_int(fd, libc::SOL_SOCKET, option).map_err(|e| {
        with_context(
            e,
            format!("getsockopt({option_name}) on fd {fd} (a socket is needed)"),
        )
    })?;
    u64::try_from(value).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("getsockopt({option_name}) on fd {fd} returned {value}, not a size"),
        )
    })
}

/// The send-buffer size of socket `fd` in bytes (`SO_SNDBUF`): the kernel's
/// current limit, autotuned unless set explicitly, overhead included (about
/// half holds payload).
pub fn send_buffer(fd: RawFd) -> io::Result<u64> {
    socket_int_option(fd, libc::SO_SNDBUF, "SO_SNDBUF")
}

/// The receive-buffer size of socket `fd` in bytes (`SO_RCVBUF`), with the
/// same caveats as [`send_buffer`].
pub fn receive_buffer(fd: RawFd) -> io::Result<u64> {
    socket_int_option(fd, libc::SO_RCVBUF, "SO_RCVBUF")
}

/// The TCP buffer autotuning ranges, `[min, default, max]` bytes each.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpMemSysctls {
    /// `net.ipv4.tcp_wmem`, or `None` if unreadable.
    pub wmem: Option<[u64; 3]>,
    /// `net.ipv4.tcp_rmem`, or `None` if unreadable.
    pub rmem: Option<[u64; 3]>,
}

impl TcpMemSysctls {
    /// The most a send buffer grows to by autotuning (`tcp_wmem` max).
    pub fn wmem_max(&self) -> Option<u64> {
        self.wmem.map(|w| w[2])
    }

    /// The most a receive buffer grows to by autotuning (`tcp_rmem` max).
    pub fn rmem_max(&self) -> Option<u64> {
        self.rmem.map(|r| r[2])
    }
}

/// `net.ipv4.tcp_wmem` and `tcp_rmem` of the calling thread's network
/// namespace; a field is `None` when its file is missing or unreadable.
pub fn tcp_mem_sysctls() -> TcpMemSysctls {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_mem_triple(&text))
    };
    TcpMemSysctls {
        wmem: read(TCP_WMEM_PATH),
        rmem: read(TCP_RMEM_PATH),
    }
}

/// Parse a `min default max` sysctl such as `"4096\t16384\t4194304\n"`:
/// exactly three unsigned integers separated by whitespace, else `None`.
pub fn parse_mem_triple(text: &str) -> Option<[u64; 3]> {
    let mut numbers = text.split_whitespace().map(|word| word.parse::<u64>());
    let triple = [
        numbers.next()?.ok()?,
        numbers.next()?.ok()?,
        numbers.next()?.ok()?,
    ];
    numbers.next().is_none().then_some(triple)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// A connected loopback pair: (client, server side).
    fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr");
        let client = TcpStream::connect(addr).expect("connect to loopback listener");
        let (server, _) = listener.accept().expect("accept");
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        (client, server)
    }

    fn raw_with_every_field_set() -> RawTcpInfo {
        RawTcpInfo {
            tcpi_state: 1,
            tcpi_ca_state: 3,
            tcpi_snd_mss: 1448,
            tcpi_rtt: 412,
            tcpi_snd_cwnd: 10,
            tcpi_total_retrans: 7,
            tcpi_pacing_rate: 1_000_000,
            tcpi_bytes_acked: 5_000,
            tcpi_segs_out: 40,
            tcpi_min_rtt: 300,
            tcpi_data_segs_out: 30,
            tcpi_delivery_rate: 2_000_000,
            tcpi_busy_time: 90_000,
            tcpi_sndbuf_limited: 60_000,
            tcpi_delivered: 29,
            tcpi_bytes_sent: 6_000,
            tcpi_reord_seen: 2,
            tcpi_rcv_ooopack: 3,
            tcpi_snd_wnd: 65_535,
            tcpi_rcv_wnd: 131_072,
            tcpi_total_rto: 1,
            tcpi_total_rto_time: 250,
            ..RawTcpInfo::default()
        }
    }

    #[test]
    fn full_answer_fills_every_field() {
        let raw = raw_with_every_field_set();
        let info = TcpInfo::from_raw(&raw, size_of::<RawTcpInfo>());
        assert_eq!(info.kernel_len, 248);
        assert_eq!(info.state, 1);
        assert_eq!(info.ca_state_name(), "Recovery");
        assert_eq!(info.rtt_us, 412);
        assert_eq!(info.pacing_rate, Some(1_000_000));
        assert_eq!(info.min_rtt_us, Some(300));
        assert_eq!(info.sndbuf_limited_us, Some(60_000));
        assert_eq!(info.rwnd_limited_us, Some(0), "kernel zero stays Some(0)");
        assert_eq!(info.snd_wnd, Some(65_535));
        assert_eq!(info.rcv_wnd, Some(131_072));
        assert_eq!(info.total_rto_time_ms, Some(250));
    }

    #[test]
    fn short_answers_leave_later_fields_none() {
        let raw = raw_with_every_field_set();
        // Linux 2.6 base struct: nothing after total_retrans.
        let base = TcpInfo::from_raw(&raw, 104);
        assert_eq!(base.total_retrans, 7);
        assert_eq!(base.pacing_rate, None);
        assert_eq!(base.bytes_acked, None);
        // Linux 4.6 (160 bytes): min_rtt yes, delivery_rate no.
        let v4_6 = TcpInfo::from_raw(&raw, 160);
        assert_eq!(v4_6.min_rtt_us, Some(300));
        assert_eq!(v4_6.data_segs_out, Some(30));
        assert_eq!(v4_6.delivery_rate, None);
        assert_eq!(v4_6.busy_time_us, None);
        // Linux 5.4 (232 bytes): snd_wnd yes, rcv_wnd no.
        let v5_4 = TcpInfo::from_raw(&raw, 232);
        assert_eq!(v5_4.snd_wnd, Some(65_535));
        assert_eq!(v5_4.rcv_wnd, None);
        assert_eq!(v5_4.total_rto, None);
        // A field cut in half is absent, not half-read.
        let cut = TcpInfo::from_raw(&raw, 108);
        assert_eq!(cut.pacing_rate, None);
    }

    #[test]
    fn bitfields_decode_per_endianness() {
        // Build the byte the way the C compiler lays out the bitfields.
        let (wscale, app_limited) = if cfg!(target_endian = "little") {
            (7 | (9 << 4), 0b0000_0001)
        } else {
            ((7 << 4) | 9, 0b1000_0000)
        };
        let raw = RawTcpInfo {
            tcpi_wscale_bits: wscale,
            tcpi_app_limited_bits: app_limited,
            ..raw_with_every_field_set()
        };
        let info = TcpInfo::from_raw(&raw, size_of::<RawTcpInfo>());
        assert_eq!((info.snd_wscale, info.rcv_wscale), (7, 9));
        assert!(info.delivery_rate_app_limited);
        // Before 4.9 the byte is padding and must not be read as the flag.
        assert!(!TcpInfo::from_raw(&raw, 104).delivery_rate_app_limited);
        // fastopen_client_fail bits alone do not set the flag.
        let other_bits = if cfg!(target_endian = "little") {
            0b110
        } else {
            0b0110_0000
        };
        let raw = RawTcpInfo {
            tcpi_app_limited_bits: other_bits,
            ..raw
        };
        assert!(!TcpInfo::from_raw(&raw, 248).delivery_rate_app_limited);
    }

    #[test]
    fn serde_round_trip_keeps_missing_fields_missing() {
        let info = TcpInfo::from_raw(&raw_with_every_field_set(), 160);
        let json = serde_json::to_string(&info).unwrap();
        assert!(json.contains("\"delivery_rate\":null"), "{json}");
        let back: TcpInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back, info);
    }

    #[test]
    fn loopback_bulk_transfer_is_accounted() {
        const TOTAL: usize = 8 << 20;
        let (client, mut server) = loopback_pair();
        let sender_fd = client.as_raw_fd();
        let writer = std::thread::spawn(move || {
            let mut client = client;
            let chunk = vec![0x5au8; 64 << 10];
            let mut sent = 0;
            while sent < TOTAL {
                let n = chunk.len().min(TOTAL - sent);
                client.write_all(&chunk[..n]).expect("write to loopback");
                sent += n;
            }
            client // keep the socket open until the checks are done
        });
        let mut buf = vec![0u8; 256 << 10];
        let mut received = 0;
        while received < TOTAL {
            match server.read(&mut buf).expect("read from loopback") {
                0 => panic!("sender closed after {received} of {TOTAL} bytes"),
                n => received += n,
            }
        }
        let client = writer.join().expect("writer thread");
        assert_eq!(sender_fd, client.as_raw_fd());

        // The last ACK may still be on its way (delayed ACK): wait, bounded.
        let deadline = Instant::now() + Duration::from_secs(5);
        let sender = loop {
            let info = tcp_info(sender_fd).expect("TCP_INFO of the sender");
            let done = info.bytes_acked.is_none_or(|b| b >= TOTAL as u64);
            if done || Instant::now() > deadline {
                break info;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let receiver = tcp_info(server.as_raw_fd()).expect("TCP_INFO of the receiver");

        for info in [&sender, &receiver] {
            assert!(info.is_established(), "{}", info.state_name());
            assert!(info.rtt_us > 0, "rtt {}", info.rtt_us);
            assert!(info.snd_mss > 0 && info.rcv_mss > 0);
            assert!(info.snd_cwnd > 0);
            assert!(info.kernel_len >= 104);
        }
        let total = TOTAL as u64;
        // bytes_acked may count the SYN's sequence number as one byte.
        if let Some(acked) = sender.bytes_acked {
            assert!((total..=total + 1).contains(&acked), "acked {acked}");
        }
        if let Some(got) = receiver.bytes_received {
            assert!((total..=total + 1).contains(&got), "received {got}");
        }
        if let Some(sent) = sender.bytes_sent {
            assert!(sent >= total, "bytes_sent {sent} < {total}");
        }
        if let Some(segs) = sender.data_segs_out {
            // Counted in MSS-sized segments even when GSO sends them as one.
            let min_segs = total / u64::from(sender.snd_mss.max(1));
            assert!(u64::from(segs) >= min_segs, "data segs {segs} < {min_segs}");
        }
        if let (Some(busy), Some(rwnd), Some(sndbuf)) = (
            sender.busy_time_us,
            sender.rwnd_limited_us,
            sender.sndbuf_limited_us,
        ) {
            assert!(
                rwnd + sndbuf <= busy,
                "limited times are parts of busy time"
            );
        }
        assert_eq!(sender.unacked, 0, "all data acknowledged");
        drop(client);
    }

    #[test]
    fn tcp_info_refuses_non_tcp_sockets() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let err = tcp_info(udp.as_raw_fd()).unwrap_err();
        assert!(err.to_string().contains("TCP_INFO"), "{err}");
        assert!(tcp_info(-1).is_err());
        assert!(congestion_control(udp.as_raw_fd()).is_err());
    }

    #[test]
    fn congestion_control_get_and_set() {
        let (client, _server) = loopback_pair();
        let fd = client.as_raw_fd();
        let current = congestion_control(fd).expect("TCP_CONGESTION get");
        assert!(!current.is_empty() && current.len() <= CONGESTION_NAME_MAX);
        let available = available_congestion_controls();
        if !available.is_empty() {
            assert!(
                available.contains(&current),
                "{current} not in {available:?}"
            );
        }
        let root = running_as_root();
        for name in ["reno", "cubic"] {
            let usable = if root {
                available.iter().any(|a| a == name)
            } else {
                allowed_congestion_controls().iter().any(|a| a == name)
            };
            if !usable {
                osprobe_core::testing::skip(format!(
                    "congestion control {name} not available/allowed here"
                ));
                continue;
            }
            set_congestion_control(fd, name).expect("set a listed congestion control");
            assert_eq!(congestion_control(fd).unwrap(), name);
        }
        let err = set_congestion_control(fd, "no-such-cc").unwrap_err();
        assert!(err.to_string().contains("no-such-cc"), "{err}");
        let err = set_congestion_control(fd, "a-name-far-too-long").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            set_congestion_control(fd, "").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    fn running_as_root() -> bool {
        osprobe_core::sys::is_root()
    }

    #[test]
    fn buffer_sizes_read_back_doubled() {
        let (client, _server) = loopback_pair();
        let fd = client.as_raw_fd();
        assert!(send_buffer(fd).unwrap() > 0);
        assert!(receive_buffer(fd).unwrap() > 0);
        let asked: libc::c_int = 64 << 10;
        osprobe_core::sys::set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, asked).unwrap();
        let wmem_max = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        match wmem_max {
            Some(max) if max >= 64 << 10 => assert_eq!(send_buffer(fd).unwrap(), 128 << 10),
            _ => osprobe_core::testing::skip("the doubling check: net.core.wmem_max below 64 KiB"),
        }
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(
            send_buffer(udp.as_raw_fd()).unwrap() > 0,
            "any socket has one"
        );
        assert!(receive_buffer(-1).is_err());
    }

    #[test]
    fn mem_triples_parse() {
        assert_eq!(
            parse_mem_triple("4096\t16384\t4194304\n"),
            Some([4096, 16384, 4_194_304])
        );
        assert_eq!(parse_mem_triple("  1 2 3  "), Some([1, 2, 3]));
        assert_eq!(parse_mem_triple("4096 16384"), None);
        assert_eq!(parse_mem_triple("4096 16384 4194304 1"), None);
        assert_eq!(parse_mem_triple("4096 -1 4194304"), None);
        assert_eq!(parse_mem_triple("4096 x 4194304"), None);
        assert_eq!(parse_mem_triple(""), None);
    }

    #[test]
    fn name_lists_parse() {
        assert_eq!(
            parse_name_list("reno bbr cubic\n"),
            ["reno", "bbr", "cubic"]
        );
        assert!(parse_name_list(" \n").is_empty());
    }

    #[test]
    fn sysctls_of_this_namespace() {
        let sysctls = tcp_mem_sysctls();
        if std::path::Path::new(TCP_WMEM_PATH).exists() {
            let [min, _, max] = sysctls.wmem.expect("tcp_wmem readable");
            assert!(min <= max);
            assert_eq!(sysctls.wmem_max(), Some(max));
        } else {
            osprobe_core::testing::skip(format!("{TCP_WMEM_PATH} absent"));
        }
        if std::path::Path::new(TCP_RMEM_PATH).exists() {
            assert!(sysctls.rmem.is_some());
        }
    }
}
