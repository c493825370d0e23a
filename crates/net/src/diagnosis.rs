//! What limited a TCP transfer, and what would help: one line from TCP_INFO.
//!
//! Method: [`diagnose`] is a pure function of a transfer's duration and
//! goodput and of the TCP_INFO of its sender (and receiver, when known). It
//! asks, in this order, and stops at the first clear answer:
//!
//! 1. Did the kernel's "chrono" counters see the sender stalled by the
//!    receive window or by its own send buffer for at least half of its busy
//!    time? Then that is the limit. A stall on the receive window is further
//!    split by comparing the largest window seen with the bandwidth-delay
//!    product (goodput x minimum RTT): a window that covered the BDP twice
//!    over filled up because the receiving application lagged (receiver
//!    CPU), a smaller one was simply too small. About one segment per round
//!    trip with a round trip of 20 ms or more points at delayed ACKs
//!    (the delayed-ACK note).
//! 2. Were at least 0.1 % of data segments retransmitted (DSACK-reported
//!    spurious ones excepted), with goodput not far above the Reno loss bound
//!    MSS/RTT x 1.22/sqrt(p) (a loss-tolerant controller such as bbr runs far
//!    above it)? Then loss.
//! 3. Was the sender idle for more than half of the transfer, or does the
//!    caller say it pauses by design? Then the application.
//! 4. Was goodput at least half of what the final congestion window allowed
//!    (cwnd x MSS / srtt)? Then the congestion window.
//! 5. Did the data in flight (goodput x srtt, by Little's law) reach half
//!    of the send buffer (only about half of it holds payload)? Then the send
//!    buffer, inferred: the kernel's counter only counts stalls that leave
//!    the write queue empty, and kernels before 4.10 lack it.
//! 6. Otherwise: unknown, saying what is missing; on a same-host path (srtt
//!    below 200 us) with no window or buffer stall, the copies and the CPU.
//!
//! Traps: the chrono counters tick in jiffies (1 to 10 ms), so transfers
//! busy for less than 20 ms are not judged by them; cwnd, srtt and windows
//! are snapshots at the moment TCP_INFO was read (normally the end), while
//! the counters cover the whole connection; a connection still in slow start
//! at the end has a final cwnd well above its average. The sysctl values in
//! the advice are those of the namespace they were read in
//! ([`diagnose_with_sysctls`]), which may not be the peer's.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::tcp_info::{TcpInfo, TcpMemSysctls, TCP_INFINITE_SSTHRESH};

/// Share of the busy time a window or buffer stall must hold to be the limit.
const DOMINANT_SHARE: f64 = 0.5;
/// Share of the busy time worth mentioning when it is not the limit.
const NOTABLE_SHARE: f64 = 0.1;
/// Busy time below which the jiffy-resolution counters are too coarse to
/// judge shares by (5 ticks at HZ=250, 2 at HZ=100).
const MIN_CHRONO_US: f64 = 20_000.0;
/// Shortest transfer whose busy share of the duration is trusted.
const MIN_DURATION_US: f64 = 100_000.0;
/// Busy less than this share of the transfer: the application left the
/// connection idle.
const APP_BUSY_SHARE: f64 = 0.5;
/// Retransmitted share of data segments from which loss can be the limit.
const LOSS_SIGNIFICANT: f64 = 0.001;
/// Retransmitted share worth mentioning when loss is not the limit.
const LOSS_NOTABLE: f64 = 0.0001;
/// Goodput above this multiple of the Reno loss bound: the controller was
/// not held back by loss.
const LOSS_TOLERANT_FACTOR: f64 = 10.0;
/// Goodput at least this share of cwnd x MSS / srtt: the window was full.
const CWND_FULL_SHARE: f64 = 0.5;
/// A receive window at least this multiple of the BDP was big enough.
const WINDOW_AMPLE_FACTOR: f64 = 2.0;
/// Round-trip time below which the path is taken to stay on this host.
const LOCAL_RTT_US: f64 = 200.0;
/// Fewer segments than this per round trip: one segment in flight.
const ONE_SEGMENT_PER_RTT: f64 = 1.5;
/// A round trip this long can hide a delayed ACK (Linux delays at least
/// 40 ms, TCP_DELACK_MIN); half of it, to allow for quick ACKs in between.
const DELAYED_ACK_RTT_US: f64 = 20_000.0;

/// What [`diagnose`] looks at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct DiagnosisInput {
    /// Length of the transfer, seconds.
    pub duration_s: f64,
    /// Application bytes delivered per second.
    pub goodput_bytes_per_s: f64,
    /// TCP_INFO of the sending socket, read at the end of the transfer
    /// before closing it.
    pub sender: Option<TcpInfo>,
    /// TCP_INFO of the receiving socket, when known.
    pub receiver: Option<TcpInfo>,
    /// The sender's SO_SNDBUF at the end, bytes (as the kernel reports it,
    /// overhead included).
    pub send_buffer_bytes: Option<u64>,
    /// The sending application pauses between writes by design (a
    /// fixed-rate or one-segment sender), so idle time is expected.
    pub app_limited_hint: bool,
}

/// What limited a transfer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The congestion controller's window (cwnd x MSS per round trip).
    CongestionWindow,
    /// The receiver's advertised window was too small for the path.
    ReceiveWindow,
    /// The sender's socket send buffer.
    SendBuffer,
    /// The sending application did not keep the connection busy.
    Application,
    /// Packet loss kept the congestion window small.
    Loss,
    /// The receiving application did not read fast enough (CPU-bound).
    Receiver,
    /// The evidence does not single out a limit.
    Unknown,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::CongestionWindow => "congestion window",
            Limit::ReceiveWindow => "receive window",
            Limit::SendBuffer => "send buffer",
            Limit::Application => "application",
            Limit::Loss => "packet loss",
            Limit::Receiver => "receiver CPU",
            Limit::Unknown => "unknown",
        })
    }
}

/// The verdict: the limit, the numbers behind it, and what would help.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// What limited the transfer.
    pub limit: Limit,
    /// The numbers the verdict rests on, `; `-separated.
    pub evidence: String,
    /// What would help.
    pub advice: String,
}

impl Diagnosis {
    /// One line: `limited by send buffer: <evidence>; try: <advice>`
    /// (`limit unknown: ...` when unknown).
    pub fn line(&self) -> String {
        match self.limit {
            Limit::Unknown => format!("limit unknown: {}; try: {}", self.evidence, self.advice),
            limit => format!(
                "limited by {limit}: {}; try: {}",
                self.evidence, self.advice
            ),
        }
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line())
    }
}

/// Diagnose a transfer without sysctl values (the advice names the sysctls
/// without their current values).
pub fn diagnose(input: &DiagnosisInput) -> Diagnosis {
    diagnose_with_sysctls(input, &TcpMemSysctls::default())
}

/// Diagnose a transfer; `sysctls` (from
/// [`crate::tcp_info::tcp_mem_sysctls`], or default) supply the current
/// `tcp_wmem`/`tcp_rmem` for the advice. Pure: reads nothing else.
pub fn diagnose_with_sysctls(input: &DiagnosisInput, sysctls: &TcpMemSysctls) -> Diagnosis {
    let Some(sender) = input.sender.as_ref() else {
        return without_sender(input);
    };
    let facts = Facts::new(input, sender);
    window_or_buffer_stall(&facts, sysctls)
        .or_else(|| loss_limit(&facts))
        .or_else(|| application_limit(&facts))
        .or_else(|| cwnd_limit(&facts))
        .or_else(|| inferred_send_buffer(&facts, sysctls))
        .unwrap_or_else(|| unexplained(&facts))
}

/// The kernel's limited-time counters, and whether they can be judged.
#[derive(Clone, Copy, Debug)]
enum Chrono {
    /// Kernel before 4.10.
    Missing,
    /// Busy too briefly for jiffy-resolution counters.
    TooShort { busy_us: f64 },
    /// Shares of the busy time stalled on the receive window / send buffer.
    Usable {
        busy_us: f64,
        rwnd_share: f64,
        sndbuf_share: f64,
    },
}

/// Retransmissions against data segments sent.
#[derive(Clone, Copy, Debug)]
struct Loss {
    retransmitted: u64,
    spurious: u64,
    segments: u64,
    /// Retransmitted share, spurious ones excepted.
    rate: f64,
    /// Reno's loss bound MSS/RTT x 1.22/sqrt(rate), bytes/s.
    reno_bound: Option<f64>,
}

/// Numbers derived once from the input; `None` where an input is missing,
/// zero or not finite.
struct Facts<'a> {
    input: &'a DiagnosisInput,
    sender: &'a TcpInfo,
    /// Bytes/s.
    goodput: Option<f64>,
    duration_us: Option<f64>,
    /// Smoothed RTT, microseconds.
    srtt_us: Option<f64>,
    /// Minimum RTT, microseconds, or srtt on kernels without it.
    min_rtt_us: Option<f64>,
    cwnd_bytes: Option<f64>,
    /// Goodput x minimum RTT, bytes.
    bdp: Option<f64>,
    /// Goodput x srtt / MSS: segments delivered per round trip.
    segments_per_rtt: Option<f64>,
    /// Busy time / duration, when both can be trusted.
    busy_share: Option<f64>,
    chrono: Chrono,
    loss: Option<Loss>,
    /// Largest receive window seen from either side, bytes.
    window: Option<f64>,
}

/// `Some(x)` when `x` is finite and above zero.
fn positive(x: f64) -> Option<f64> {
    (x.is_finite() && x > 0.0).then_some(x)
}

impl<'a> Facts<'a> {
    fn new(input: &'a DiagnosisInput, sender: &'a TcpInfo) -> Facts<'a> {
        let goodput = positive(input.goodput_bytes_per_s);
        let duration_us = positive(input.duration_s).map(|s| s * 1e6);
        let srtt_us = positive(f64::from(sender.rtt_us));
        let min_rtt_us = sender
            .min_rtt_us
            .and_then(|m| positive(f64::from(m)))
            .or(srtt_us);
        let mss = positive(f64::from(sender.snd_mss));
        let cwnd_bytes = mss.and_then(|m| positive(f64::from(sender.snd_cwnd) * m));
        let bdp = goodput.zip(min_rtt_us).map(|(g, rtt)| g * rtt / 1e6);
        let segments_per_rtt = goodput
            .zip(srtt_us)
            .zip(mss)
            .map(|((g, rtt), m)| g * rtt / 1e6 / m);

        let chrono = match (
            sender.busy_time_us,
            sender.rwnd_limited_us,
            sender.sndbuf_limited_us,
        ) {
            (Some(busy), Some(rwnd), Some(sndbuf)) => {
                let busy_us = busy as f64;
                if busy_us < MIN_CHRONO_US {
                    Chrono::TooShort { busy_us }
                } else {
                    Chrono::Usable {
                        busy_us,
                        rwnd_share: (rwnd as f64 / busy_us).min(1.0),
                        sndbuf_share: (sndbuf as f64 / busy_us).min(1.0),
                    }
                }
            }
            _ => Chrono::Missing,
        };
        let busy_share = match (sender.busy_time_us, duration_us) {
            (Some(busy), Some(d)) if d >= MIN_DURATION_US => Some((busy as f64 / d).min(1.0)),
            _ => None,
        };

        let loss = Self::loss(sender, mss, srtt_us);
        let window = [
            sender.snd_wnd,
            input.receiver.as_ref().and_then(|r| r.rcv_wnd),
        ]
        .into_iter()
        .flatten()
        .max()
        .and_then(|w| positive(f64::from(w)));

        Facts {
            input,
            sender,
            goodput,
            duration_us,
            srtt_us,
            min_rtt_us,
            cwnd_bytes,
            bdp,
            segments_per_rtt,
            busy_share,
            chrono,
            loss,
            window,
        }
    }

    fn loss(sender: &TcpInfo, mss: Option<f64>, srtt_us: Option<f64>) -> Option<Loss> {
        // Data segments where the kernel counts them (4.6), else all segments.
        let segments = u64::from(sender.data_segs_out.or(sender.segs_out)?);
        if segments == 0 {
            return None;
        }
        let retransmitted = u64::from(sender.total_retrans);
        let spurious = u64::from(sender.dsack_dups.unwrap_or(0)).min(retransmitted);
        let rate = (retransmitted - spurious) as f64 / segments as f64;
        let reno_bound = mss
            .zip(srtt_us)
            .zip(positive(rate))
            .map(|((m, rtt), p)| m / (rtt / 1e6) * 1.22 / p.sqrt());
        Some(Loss {
            retransmitted,
            spurious,
            segments,
            rate,
            reno_bound,
        })
    }

    /// `goodput X`, or a note that it is unknown.
    fn goodput_text(&self) -> String {
        match self.goodput {
            Some(g) => format!("goodput {}", rate(g)),
            None => "goodput unknown".to_string(),
        }
    }

    /// `BDP at goodput x min rtt 412 us = 5.1 MiB`, when known.
    fn bdp_text(&self) -> Option<String> {
        let (bdp, rtt) = self.bdp.zip(self.min_rtt_us)?;
        Some(format!(
            "BDP at goodput x min rtt {} = {}",
            micros(rtt),
            bytes(bdp)
        ))
    }

    /// `cwnd 10 x 1448 B = 14.1 KiB`.
    fn cwnd_text(&self) -> String {
        let s = self.sender;
        format!(
            "cwnd {} x {} B = {}",
            s.snd_cwnd,
            s.snd_mss,
            bytes(f64::from(s.snd_cwnd) * f64::from(s.snd_mss))
        )
    }

    /// `1.0 segments per round trip (srtt 40.0 ms)` when about one segment
    /// was in flight per round trip and the srtt is long enough to hide a
    /// delayed ACK, with the receiver's delayed-ACK timeout if known. Few
    /// segments per round trip alone is not enough: with loopback's 64 KiB
    /// MSS and a 30 us srtt even 1 GB/s is half a segment, and a slow reader
    /// behind a one-segment window looks the same but with a short srtt.
    fn one_segment_text(&self) -> Option<String> {
        let per_rtt = self.segments_per_rtt?;
        let srtt = self.srtt_us?;
        if per_rtt >= ONE_SEGMENT_PER_RTT || srtt < DELAYED_ACK_RTT_US {
            return None;
        }
        let mut text = format!(
            "{per_rtt:.1} segments per round trip (srtt {})",
            micros(srtt)
        );
        if let Some(ato) = self
            .input
            .receiver
            .as_ref()
            .and_then(|r| positive(f64::from(r.ato_us)))
        {
            text.push_str(&format!(", receiver's delayed-ACK timeout {}", micros(ato)));
        }
        Some(text)
    }

    /// Observations that did not decide the verdict but qualify it.
    fn side_notes(&self, limit: Limit) -> Vec<String> {
        let mut notes = Vec::new();
        if let Chrono::Usable {
            rwnd_share,
            sndbuf_share,
            ..
        } = self.chrono
        {
            if limit != Limit::ReceiveWindow
                && limit != Limit::Receiver
                && rwnd_share >= NOTABLE_SHARE
            {
                notes.push(format!("also rwnd-limited {}", share(rwnd_share)));
            }
            if limit != Limit::SendBuffer && sndbuf_share >= NOTABLE_SHARE {
                notes.push(format!("also sndbuf-limited {}", share(sndbuf_share)));
            }
        }
        if let Some(loss) = self.loss.filter(|l| l.rate >= LOSS_NOTABLE) {
            if limit != Limit::Loss {
                notes.push(format!(
                    "retransmitted {} of data segments",
                    percent(loss.rate)
                ));
            }
        }
        notes
    }

    fn verdict(&self, limit: Limit, mut evidence: Vec<String>, advice: String) -> Diagnosis {
        evidence.extend(self.side_notes(limit));
        Diagnosis {
            limit,
            evidence: evidence.join("; "),
            advice,
        }
    }
}

/// Advice for a one-segment-per-round-trip transfer (the delayed-ACK note).
const DELAYED_ACK_ADVICE: &str = "with one segment in flight every segment waits for the \
ACK of the last, which the receiver may delay by 40 ms or more: set TCP_QUICKACK on the \
receiver after every read, or keep more than one segment in flight (the delayed-ACK note: 2 kB/s with \
delayed ACKs, 2.2 MB/s with TCP_QUICKACK)";

/// Step 1: the kernel saw the sender stalled by a window or a buffer.
fn window_or_buffer_stall(f: &Facts, sysctls: &TcpMemSysctls) -> Option<Diagnosis> {
    let Chrono::Usable {
        busy_us,
        rwnd_share,
        sndbuf_share,
    } = f.chrono
    else {
        return None;
    };
    if rwnd_share + sndbuf_share < DOMINANT_SHARE {
        return None;
    }
    if sndbuf_share >= rwnd_share {
        Some(send_buffer_verdict(
            f,
            sysctls,
            format!(
                "sndbuf-limited {} of busy time {}",
                share(sndbuf_share),
                micros(busy_us)
            ),
        ))
    } else {
        Some(receive_window_verdict(f, sysctls, rwnd_share, busy_us))
    }
}

fn send_buffer_verdict(f: &Facts, sysctls: &TcpMemSysctls, first: String) -> Diagnosis {
    let mut evidence = vec![first];
    evidence.extend(f.bdp_text());
    if let Some(buffer) = f.input.send_buffer_bytes {
        evidence.push(format!(
            "send buffer {} (about half holds payload)",
            bytes(buffer as f64)
        ));
    }
    evidence.push(f.cwnd_text());
    evidence.push(f.goodput_text());
    let seed = "the BBR talk needed tcp_wmem raised to 100 MB for a 100 ms RTT";
    let advice = match (sysctls.wmem_max(), f.input.send_buffer_bytes) {
        // Autotuning would have grown a buffer this far below its ceiling
        // had it been allowed to: the size was most likely set explicitly.
        (Some(max), Some(buffer)) if buffer.saturating_mul(4) <= max => format!(
            "the buffer stayed at {} although net.ipv4.tcp_wmem allows {max}: if the \
             application sets SO_SNDBUF, raise it or leave it unset (an explicit \
             SO_SNDBUF turns autotuning off); {seed}",
            bytes(buffer as f64)
        ),
        (Some(max), _) => format!(
            "raise net.ipv4.tcp_wmem max (now {max}) or SO_SNDBUF (an explicit SO_SNDBUF \
             turns autotuning off); {seed}"
        ),
        (None, _) => format!(
            "raise net.ipv4.tcp_wmem max or SO_SNDBUF (an explicit SO_SNDBUF turns \
             autotuning off); {seed}"
        ),
    };
    f.verdict(Limit::SendBuffer, evidence, advice)
}

fn receive_window_verdict(
    f: &Facts,
    sysctls: &TcpMemSysctls,
    rwnd_share: f64,
    busy_us: f64,
) -> Diagnosis {
    let mut evidence = vec![format!(
        "rwnd-limited {} of busy time {}",
        share(rwnd_share),
        micros(busy_us)
    )];
    let rmem_advice = match sysctls.rmem_max() {
        Some(max) => format!(
            "raise the receiver's net.ipv4.tcp_rmem max (here {max}) or its SO_RCVBUF \
             (the window must cover rate x rtt)"
        ),
        None => "raise the receiver's net.ipv4.tcp_rmem max or its SO_RCVBUF \
                 (the window must cover rate x rtt)"
            .to_string(),
    };

    if let Some(one_segment) = f.one_segment_text() {
        evidence.push(one_segment);
        if let Some(window) = f.window {
            evidence.push(format!("largest window seen {}", bytes(window)));
        }
        evidence.push(f.goodput_text());
        return f.verdict(
            Limit::ReceiveWindow,
            evidence,
            DELAYED_ACK_ADVICE.to_string(),
        );
    }

    match (f.window, f.bdp) {
        (Some(window), Some(bdp)) if window >= WINDOW_AMPLE_FACTOR * bdp => {
            evidence.push(format!(
                "window up to {} covered the BDP of {} {:.0} times over, so it filled \
                 because the reader lagged",
                bytes(window),
                bytes(bdp),
                window / bdp
            ));
            evidence.push(f.goodput_text());
            f.verdict(
                Limit::Receiver,
                evidence,
                "make the receiving application read faster: larger reads, a CPU of its \
                 own (pinning), less work per byte"
                    .to_string(),
            )
        }
        (Some(window), Some(bdp)) => {
            evidence.push(format!(
                "largest window seen {} vs BDP at goodput x min rtt {} = {}",
                bytes(window),
                micros(f.min_rtt_us.unwrap_or(0.0)),
                bytes(bdp)
            ));
            evidence.push(f.goodput_text());
            f.verdict(Limit::ReceiveWindow, evidence, rmem_advice)
        }
        _ => {
            evidence.push(
                "window size or BDP unknown, so a small window cannot be told from a slow \
                 reader"
                    .to_string(),
            );
            evidence.push(f.goodput_text());
            f.verdict(
                Limit::ReceiveWindow,
                evidence,
                format!("{rmem_advice}; or make the receiving application read faster"),
            )
        }
    }
}

/// Step 2: loss kept the window small.
fn loss_limit(f: &Facts) -> Option<Diagnosis> {
    let loss = f.loss?;
    if loss.rate < LOSS_SIGNIFICANT {
        return None;
    }
    if let (Some(goodput), Some(bound)) = (f.goodput, loss.reno_bound) {
        if goodput > LOSS_TOLERANT_FACTOR * bound {
            return None;
        }
    }
    let mut evidence = vec![format!(
        "retransmitted {} of {} data segments ({}{})",
        loss.retransmitted,
        loss.segments,
        percent(loss.rate),
        if loss.spurious > 0 {
            format!(", {} spurious per DSACK not counted", loss.spurious)
        } else {
            String::new()
        }
    )];
    if let Some(bound) = loss.reno_bound {
        evidence.push(format!(
            "Reno bound MSS/RTT x 1.22/sqrt(p) = {} vs {}",
            rate(bound),
            f.goodput_text()
        ));
    } else {
        evidence.push(f.goodput_text());
    }
    evidence.push(f.cwnd_text());
    evidence.push(format!("ca_state {}", f.sender.ca_state_name()));
    Some(
        f.verdict(
            Limit::Loss,
            evidence,
            "find where packets drop (link errors, an overflowing queue or shaper) or use a \
         loss-tolerant congestion control such as bbr (the BBR talk, 100 ms + 1% loss: bbr 8602 \
         vs cubic 633 Mbit/s)"
                .to_string(),
        ),
    )
}

/// Step 3: the sender application left the connection idle.
fn application_limit(f: &Facts) -> Option<Diagnosis> {
    let idle = f.busy_share.filter(|&b| b < APP_BUSY_SHARE);
    if !f.input.app_limited_hint && idle.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    if f.input.app_limited_hint {
        evidence.push("the sender pauses between writes by design".to_string());
    }
    if let (Some(busy), Some(d)) = (f.busy_share, f.duration_us) {
        evidence.push(format!(
            "sender had data to send {} of the {} transfer",
            share(busy),
            micros(d)
        ));
    }
    if f.sender.delivery_rate_app_limited {
        evidence.push("last delivery-rate sample app-limited".to_string());
    }
    let one_segment = f.one_segment_text();
    evidence.extend(one_segment.clone());
    evidence.push(f.goodput_text());
    let advice = if one_segment.is_some() {
        DELAYED_ACK_ADVICE.to_string()
    } else if f.input.app_limited_hint {
        "nothing on the path: the rate is the application's own; to go faster the sender \
         must write more per pause"
            .to_string()
    } else {
        "keep the socket fed: write larger chunks or more often, overlap producing the data \
         with sending it (a reader thread, sendfile)"
            .to_string()
    };
    Some(f.verdict(Limit::Application, evidence, advice))
}

/// Step 4: the congestion window was full.
fn cwnd_limit(f: &Facts) -> Option<Diagnosis> {
    let (goodput, cwnd_bytes, srtt) = (f.goodput?, f.cwnd_bytes?, f.srtt_us?);
    let window_rate = cwnd_bytes / (srtt / 1e6);
    let used = goodput / window_rate;
    if used < CWND_FULL_SHARE {
        return None;
    }
    let s = f.sender;
    let mut evidence = vec![
        format!(
            "{} per srtt {} allows {}; {} ({} of it)",
            f.cwnd_text(),
            micros(srtt),
            rate(window_rate),
            f.goodput_text(),
            share(used.min(1.0))
        ),
        format!("ca_state {}", s.ca_state_name()),
    ];
    let advice = if s.snd_ssthresh >= TCP_INFINITE_SSTHRESH {
        evidence.push("ssthresh never set (slow start, or bbr which does not use it)".into());
        "a longer transfer lets the window grow; raise the initial window (ip route ... \
         initcwnd) for short ones, or compare congestion controls"
            .to_string()
    } else {
        evidence.push(format!("ssthresh {} segments", s.snd_ssthresh));
        "the congestion controller cut the window after loss or ECN marks: look for drops \
         or a queue on the path, or try another congestion control (bbr)"
            .to_string()
    };
    Some(f.verdict(Limit::CongestionWindow, evidence, advice))
}

/// Step 5: the data in flight fills the send buffer's payload half.
///
/// By Little's law the bytes in flight average goodput x srtt; when that
/// reaches half of SO_SNDBUF (the half that holds payload), the buffer is
/// what holds the sender back, even where the kernel's counter missed it:
/// it only counts stalls that leave the write queue empty, and it does not
/// exist before Linux 4.10.
fn inferred_send_buffer(f: &Facts, sysctls: &TcpMemSysctls) -> Option<Diagnosis> {
    let (goodput, srtt) = (f.goodput?, f.srtt_us?);
    let buffer = positive(f.input.send_buffer_bytes? as f64)?;
    let in_flight = goodput * srtt / 1e6;
    if in_flight < buffer / 2.0 {
        return None;
    }
    let counter = match f.chrono {
        Chrono::Missing => "no sndbuf-limited counter before Linux 4.10".to_string(),
        Chrono::TooShort { busy_us } => format!(
            "busy {} too short for the sndbuf-limited counter",
            micros(busy_us)
        ),
        Chrono::Usable { sndbuf_share, .. } => format!(
            "the kernel's sndbuf-limited counter says {} but counts only stalls that \
             empty the write queue",
            share(sndbuf_share)
        ),
    };
    Some(send_buffer_verdict(
        f,
        sysctls,
        format!(
            "inferred: in flight on average goodput x srtt {} = {}, at least half the \
             send buffer; {counter}",
            micros(srtt),
            bytes(in_flight),
        ),
    ))
}

/// Step 6: nothing stood out.
fn unexplained(f: &Facts) -> Diagnosis {
    let local = f.srtt_us.is_some_and(|rtt| rtt < LOCAL_RTT_US);
    let mut evidence = Vec::new();
    let mut missing = Vec::new();
    match f.chrono {
        Chrono::Usable {
            busy_us,
            rwnd_share,
            sndbuf_share,
        } => {
            if local {
                evidence.push("no window or buffer limit: CPU/memory copy bound (loopback)".into());
            }
            evidence.push(format!(
                "rwnd-limited {}, sndbuf-limited {} of busy time {}",
                share(rwnd_share),
                share(sndbuf_share),
                micros(busy_us)
            ));
        }
        Chrono::TooShort { busy_us } => {
            if local {
                evidence.push("probably CPU/memory copy bound (loopback)".into());
            }
            missing.push(format!(
                "busy time {} is too short for the jiffy-resolution limited-time counters",
                micros(busy_us)
            ));
        }
        Chrono::Missing => {
            missing.push("limited-time counters (need Linux 4.10)".to_string());
        }
    }
    match f.srtt_us {
        Some(rtt) => evidence.push(format!("srtt {}", micros(rtt))),
        None => missing.push("round-trip time".to_string()),
    }
    match (f.goodput, f.cwnd_bytes, f.srtt_us) {
        (Some(g), Some(cwnd), Some(rtt)) => evidence.push(format!(
            "{} allows {} vs {}",
            f.cwnd_text(),
            rate(cwnd / (rtt / 1e6)),
            rate(g)
        )),
        (None, _, _) => missing.push("goodput".to_string()),
        _ => missing.push("congestion window or MSS".to_string()),
    }
    if f.sender.snd_ssthresh >= TCP_INFINITE_SSTHRESH && !local {
        evidence.push(
            "ssthresh never set: perhaps in slow start most of the time (or bbr)".to_string(),
        );
    }
    if f.input.receiver.is_none() {
        missing.push("receiver's TCP_INFO".to_string());
    }
    if !missing.is_empty() {
        evidence.push(format!("missing: {}", missing.join(", ")));
    }
    let advice = if local && matches!(f.chrono, Chrono::Usable { .. }) {
        "on a same-host path the copies and the CPU set the rate: larger reads and writes, \
         sender and receiver pinned to different cores, MSG_ZEROCOPY"
    } else {
        "measure longer (the counters tick in jiffies) on Linux 4.10 or later, with both \
         ends' TCP_INFO, and compare with iperf3"
    };
    f.verdict(Limit::Unknown, evidence, advice.to_string())
}

/// No TCP_INFO from the sender: only the hint and the receiver can speak.
fn without_sender(input: &DiagnosisInput) -> Diagnosis {
    let mut evidence = vec!["no TCP_INFO from the sender".to_string()];
    if let Some(r) = &input.receiver {
        let mut seen = format!("receiver: rcv_space {}", bytes(f64::from(r.rcv_space)));
        if let Some(w) = r.rcv_wnd {
            seen.push_str(&format!(", rcv_wnd {}", bytes(f64::from(w))));
        }
        if r.rcv_rtt_us > 0 {
            seen.push_str(&format!(", rcv_rtt {}", micros(f64::from(r.rcv_rtt_us))));
        }
        evidence.push(seen);
    }
    match positive(input.goodput_bytes_per_s) {
        Some(g) => evidence.push(format!("goodput {}", rate(g))),
        None => evidence.push("goodput unknown".to_string()),
    }
    if input.app_limited_hint {
        evidence.insert(0, "the sender pauses between writes by design".to_string());
        return Diagnosis {
            limit: Limit::Application,
            evidence: evidence.join("; "),
            advice: "nothing to fix on the path as far as can be told; read the sender's \
                     TCP_INFO to confirm"
                .to_string(),
        };
    }
    Diagnosis {
        limit: Limit::Unknown,
        evidence: evidence.join("; "),
        advice: "read TCP_INFO on the sending socket before closing it".to_string(),
    }
}

/// `512 B`, `14.1 KiB`, `5.1 MiB`, `1.2 GiB`.
fn bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024.0 {
        return format!("{n:.0} B");
    }
    let mut value = n / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Bytes/s as bits: `800 bit/s`, `16.0 kbit/s`, `633.0 Mbit/s`, `9.41 Gbit/s`.
fn rate(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    if bits < 1e3 {
        format!("{bits:.0} bit/s")
    } else if bits < 1e6 {
        format!("{:.1} kbit/s", bits / 1e3)
    } else if bits < 1e9 {
        format!("{:.1} Mbit/s", bits / 1e6)
    } else {
        format!("{:.2} Gbit/s", bits / 1e9)
    }
}

/// `412 us`, `40.0 ms`, `1.20 s`.
fn micros(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.0} us")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A share of 0..1 as a whole percentage: `83%`.
fn share(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// A small rate as a percentage with two decimals: `1.20%`, `0.05%`.
fn percent(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A healthy established sender on a 10 ms path: cwnd 100 x 1448 B,
    /// 100,000 data segments, no loss, busy the whole 2 s, no stalls.
    fn sender() -> TcpInfo {
        TcpInfo {
            kernel_len: 248,
            state: 1,
            snd_mss: 1448,
            rcv_mss: 1448,
            rtt_us: 10_000,
            rttvar_us: 500,
            min_rtt_us: Some(9_800),
            snd_cwnd: 100,
            snd_ssthresh: 80,
            total_retrans: 0,
            segs_out: Some(100_500),
            data_segs_out: Some(100_000),
            dsack_dups: Some(0),
            busy_time_us: Some(2_000_000),
            rwnd_limited_us: Some(0),
            sndbuf_limited_us: Some(0),
            snd_wnd: Some(4 << 20),
            delivery_rate: Some(14_000_000),
            ..TcpInfo::default()
        }
    }

    fn input(sender: TcpInfo, goodput: f64) -> DiagnosisInput {
        DiagnosisInput {
            duration_s: 2.0,
            goodput_bytes_per_s: goodput,
            sender: Some(sender),
            receiver: None,
            send_buffer_bytes: Some(4 << 20),
            app_limited_hint: false,
        }
    }

    /// cwnd 100 x 1448 B per 10 ms = 14.48 MB/s.
    const CWND_RATE: f64 = 14_480_000.0;

    #[test]
    fn full_congestion_window() {
        let d = diagnose(&input(sender(), 0.9 * CWND_RATE));
        assert_eq!(d.limit, Limit::CongestionWindow, "{}", d.line());
        assert!(d.evidence.contains("cwnd 100 x 1448 B"), "{}", d.evidence);
        assert!(d.evidence.contains("ssthresh 80"), "{}", d.evidence);
        assert!(d.line().starts_with("limited by congestion window: "));
    }

    #[test]
    fn send_buffer_stall() {
        let s = TcpInfo {
            sndbuf_limited_us: Some(1_660_000),
            ..sender()
        };
        let sysctls = TcpMemSysctls {
            wmem: Some([4096, 16384, 4_194_304]),
            rmem: None,
        };
        let d = diagnose_with_sysctls(&input(s, 0.9 * CWND_RATE), &sysctls);
        assert_eq!(d.limit, Limit::SendBuffer, "{}", d.line());
        assert!(d.evidence.contains("sndbuf-limited 83%"), "{}", d.evidence);
        assert!(d.evidence.contains("send buffer 4.0 MiB"), "{}", d.evidence);
        assert!(d.advice.contains("now 4194304"), "{}", d.advice);
        // Without sysctls the advice still names the knob.
        let d = diagnose(&input(
            TcpInfo {
                sndbuf_limited_us: Some(1_660_000),
                ..sender()
            },
            1e6,
        ));
        assert!(d.advice.contains("net.ipv4.tcp_wmem"), "{}", d.advice);
        assert!(!d.advice.contains("now"), "{}", d.advice);
    }

    #[test]
    fn small_receive_window() {
        // 64 KiB window over a 9.8 ms path: 6.7 MB/s at best.
        let s = TcpInfo {
            rwnd_limited_us: Some(1_800_000),
            snd_wnd: Some(65_536),
            ..sender()
        };
        let d = diagnose(&input(s, 6_500_000.0));
        assert_eq!(d.limit, Limit::ReceiveWindow, "{}", d.line());
        assert!(d.evidence.contains("rwnd-limited 90%"), "{}", d.evidence);
        assert!(d.advice.contains("tcp_rmem"), "{}", d.advice);
    }

    #[test]
    fn slow_reader_behind_an_ample_window() {
        // Loopback-like: 30 us rtt, 6 MiB window, 1 GB/s: BDP is 30 kB.
        let s = TcpInfo {
            rtt_us: 30,
            min_rtt_us: Some(25),
            snd_mss: 65_483,
            snd_cwnd: 40,
            rwnd_limited_us: Some(1_500_000),
            snd_wnd: Some(6 << 20),
            ..sender()
        };
        let d = diagnose(&input(s, 1e9));
        assert_eq!(d.limit, Limit::Receiver, "{}", d.line());
        assert!(d.evidence.contains("reader lagged"), "{}", d.evidence);
    }

    #[test]
    fn delayed_ack_one_segment_in_flight() {
        // Window clamped to one segment, every ACK delayed 40 ms (the delayed-ACK note).
        let s = TcpInfo {
            rtt_us: 40_000,
            min_rtt_us: Some(39_000),
            snd_cwnd: 10,
            rwnd_limited_us: Some(1_900_000),
            snd_wnd: Some(1448),
            ..sender()
        };
        let receiver = TcpInfo {
            ato_us: 40_000,
            ..TcpInfo::default()
        };
        let mut inp = input(s, 1448.0 / 0.04);
        inp.receiver = Some(receiver);
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::ReceiveWindow, "{}", d.line());
        assert!(
            d.evidence.contains("delayed-ACK timeout 40.0 ms"),
            "{}",
            d.evidence
        );
        assert!(d.advice.contains("TCP_QUICKACK"), "{}", d.advice);
        // A one-segment sender by design with no window stall: application.
        let s = TcpInfo {
            rtt_us: 40_000,
            min_rtt_us: Some(39_000),
            snd_cwnd: 10,
            busy_time_us: Some(2_000_000),
            ..sender()
        };
        let mut inp = input(s, 1448.0 / 0.04);
        inp.app_limited_hint = true;
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::Application, "{}", d.line());
        assert!(d.advice.contains("TCP_QUICKACK"), "{}", d.advice);
    }

    #[test]
    fn slow_reader_behind_a_one_segment_window_is_not_delayed_acks() {
        // SO_RCVBUF clamped to ~one 47 KiB segment, reader sleeping between
        // reads, srtt 575 us: one segment per round trip, but no delayed ACK.
        let s = TcpInfo {
            rtt_us: 575,
            min_rtt_us: Some(11),
            snd_mss: 47_616,
            snd_cwnd: 12,
            busy_time_us: Some(816_000),
            rwnd_limited_us: Some(740_000),
            snd_wnd: Some(95_232),
            ..sender()
        };
        let d = diagnose(&input(s, 82_000_000.0));
        assert_eq!(d.limit, Limit::Receiver, "{}", d.line());
        assert!(!d.advice.contains("QUICKACK"), "{}", d.advice);
    }

    #[test]
    fn send_buffer_inferred_where_the_counter_is_silent() {
        // Busy all the time, no stall counted, window far from full, but
        // 2.7 MB/s x 14.8 ms = 40 kB in flight against an 8 KiB buffer.
        let s = TcpInfo {
            rtt_us: 14_800,
            min_rtt_us: Some(5),
            snd_mss: 65_483,
            snd_cwnd: 12,
            ..sender()
        };
        let mut inp = input(s, 2_700_000.0);
        inp.send_buffer_bytes = Some(8192);
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::SendBuffer, "{}", d.line());
        assert!(
            d.evidence.starts_with("inferred: in flight"),
            "{}",
            d.evidence
        );
        assert!(d.evidence.contains("counter says 0%"), "{}", d.evidence);
        let sysctls = TcpMemSysctls {
            wmem: Some([4096, 16384, 4_194_304]),
            rmem: None,
        };
        let d = diagnose_with_sysctls(&inp, &sysctls);
        assert!(d.advice.contains("leave it unset"), "{}", d.advice);
        assert_eq!(d.evidence.matches("8.0 KiB").count(), 1, "{}", d.evidence);
        // The same with a 4 MiB buffer: not the buffer.
        inp.send_buffer_bytes = Some(4 << 20);
        assert_ne!(diagnose(&inp).limit, Limit::SendBuffer);
    }

    #[test]
    fn heavy_loss_with_a_loss_based_controller() {
        // 1% loss at 100 ms: Reno bound 1448/0.1 x 1.22/0.1 = 177 kB/s.
        let s = TcpInfo {
            rtt_us: 100_000,
            min_rtt_us: Some(100_000),
            snd_cwnd: 12,
            snd_ssthresh: 10,
            ca_state: 3,
            total_retrans: 1_000,
            ..sender()
        };
        let d = diagnose(&input(s, 150_000.0));
        assert_eq!(d.limit, Limit::Loss, "{}", d.line());
        assert!(d.evidence.contains("1000 of 100000"), "{}", d.evidence);
        assert!(d.evidence.contains("1.00%"), "{}", d.evidence);
        assert!(d.evidence.contains("Recovery"), "{}", d.evidence);
    }

    #[test]
    fn loss_that_the_controller_shrugs_off_is_not_the_limit() {
        // Same 1% loss, but goodput 100x the Reno bound (bbr-like), window full.
        let s = TcpInfo {
            rtt_us: 100_000,
            min_rtt_us: Some(100_000),
            snd_cwnd: 15_000,
            total_retrans: 1_000,
            ..sender()
        };
        let d = diagnose(&input(s, 0.9 * 15_000.0 * 1448.0 / 0.1));
        assert_eq!(d.limit, Limit::CongestionWindow, "{}", d.line());
        assert!(d.evidence.contains("retransmitted 1.00%"), "{}", d.evidence);
    }

    #[test]
    fn spurious_retransmissions_do_not_count_as_loss() {
        let s = TcpInfo {
            total_retrans: 1_000,
            dsack_dups: Some(1_000),
            ..sender()
        };
        let d = diagnose(&input(s, 0.9 * CWND_RATE));
        assert_eq!(d.limit, Limit::CongestionWindow, "{}", d.line());
    }

    #[test]
    fn idle_sender_is_application_limited() {
        let s = TcpInfo {
            busy_time_us: Some(400_000),
            delivery_rate_app_limited: true,
            ..sender()
        };
        let d = diagnose(&input(s, 1_000_000.0));
        assert_eq!(d.limit, Limit::Application, "{}", d.line());
        assert!(d.evidence.contains("20% of the 2.00 s"), "{}", d.evidence);
        assert!(d.evidence.contains("app-limited"), "{}", d.evidence);
    }

    #[test]
    fn paced_sender_by_design() {
        let mut inp = input(sender(), 1_000_000.0);
        inp.app_limited_hint = true;
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::Application, "{}", d.line());
        assert!(d.evidence.contains("by design"), "{}", d.evidence);
    }

    #[test]
    fn loopback_without_limits_is_copy_bound() {
        let s = TcpInfo {
            rtt_us: 30,
            min_rtt_us: Some(20),
            snd_mss: 65_483,
            snd_cwnd: 40,
            snd_ssthresh: TCP_INFINITE_SSTHRESH,
            rwnd_limited_us: Some(100_000),
            ..sender()
        };
        let d = diagnose(&input(s, 2e9));
        assert_eq!(d.limit, Limit::Unknown, "{}", d.line());
        assert!(
            d.evidence
                .starts_with("no window or buffer limit: CPU/memory copy bound (loopback)"),
            "{}",
            d.evidence
        );
        assert!(d.evidence.contains("rwnd-limited 5%"), "{}", d.evidence);
        assert!(d.line().starts_with("limit unknown: "));
    }

    #[test]
    fn short_transfer_is_not_judged_by_the_counters() {
        // Busy 4 ms: the stall shares are noise, even if they look dominant.
        let s = TcpInfo {
            rtt_us: 30,
            min_rtt_us: Some(20),
            snd_mss: 65_483,
            snd_cwnd: 40,
            busy_time_us: Some(4_000),
            sndbuf_limited_us: Some(4_000),
            ..sender()
        };
        let mut inp = input(s, 2e9);
        inp.duration_s = 0.004;
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::Unknown, "{}", d.line());
        assert!(d.evidence.contains("too short"), "{}", d.evidence);
    }

    #[test]
    fn old_kernel_without_counters() {
        // Linux 4.9-like: no chrono stats; BDP 2.9 MB/s x 9.8 ms = 28 kB.
        let s = TcpInfo {
            busy_time_us: None,
            rwnd_limited_us: None,
            sndbuf_limited_us: None,
            ..sender()
        };
        // Well below the window: nothing to infer.
        let d = diagnose(&input(s.clone(), 0.2 * CWND_RATE));
        assert_eq!(d.limit, Limit::Unknown, "{}", d.line());
        assert!(d.evidence.contains("need Linux 4.10"), "{}", d.evidence);
        // A 50 kB send buffer against that BDP: inferred send-buffer limit.
        let mut inp = input(s, 0.2 * CWND_RATE);
        inp.send_buffer_bytes = Some(50_000);
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::SendBuffer, "{}", d.line());
        assert!(d.evidence.contains("inferred"), "{}", d.evidence);
    }

    #[test]
    fn missing_sender_is_unknown_and_says_so() {
        let inp = DiagnosisInput {
            duration_s: 1.0,
            goodput_bytes_per_s: 1e6,
            receiver: Some(TcpInfo {
                rcv_space: 65_536,
                ..TcpInfo::default()
            }),
            ..DiagnosisInput::default()
        };
        let d = diagnose(&inp);
        assert_eq!(d.limit, Limit::Unknown);
        assert!(
            d.evidence.contains("no TCP_INFO from the sender"),
            "{}",
            d.evidence
        );
        assert!(d.evidence.contains("rcv_space 64.0 KiB"), "{}", d.evidence);
        let d = diagnose(&DiagnosisInput {
            app_limited_hint: true,
            ..inp
        });
        assert_eq!(d.limit, Limit::Application);
    }

    #[test]
    fn garbage_numbers_do_not_panic_or_print_nan() {
        let zeroed = TcpInfo::default();
        for goodput in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            for duration in [0.0, -3.0, f64::NAN] {
                let inp = DiagnosisInput {
                    duration_s: duration,
                    goodput_bytes_per_s: goodput,
                    sender: Some(zeroed.clone()),
                    receiver: Some(zeroed.clone()),
                    send_buffer_bytes: Some(0),
                    app_limited_hint: false,
                };
                let line = diagnose(&inp).line();
                assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
            }
        }
        let d = diagnose(&DiagnosisInput {
            sender: Some(zeroed),
            ..DiagnosisInput::default()
        });
        assert_eq!(d.limit, Limit::Unknown);
        assert!(d.evidence.contains("missing:"), "{}", d.evidence);
    }

    #[test]
    fn limit_serializes_in_snake_case_and_displays_in_words() {
        assert_eq!(
            serde_json::to_string(&Limit::CongestionWindow).unwrap(),
            "\"congestion_window\""
        );
        let back: Limit = serde_json::from_str("\"send_buffer\"").unwrap();
        assert_eq!(back, Limit::SendBuffer);
        assert_eq!(Limit::Receiver.to_string(), "receiver CPU");
        let d = Diagnosis {
            limit: Limit::Loss,
            evidence: "e".into(),
            advice: "a".into(),
        };
        assert_eq!(d.to_string(), "limited by packet loss: e; try: a");
    }

    #[test]
    fn formatting_picks_readable_units() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(4_194_304.0), "4.0 MiB");
        assert_eq!(rate(125_000.0), "1.0 Mbit/s");
        assert_eq!(rate(1.25e9), "10.00 Gbit/s");
        assert_eq!(micros(412.0), "412 us");
        assert_eq!(micros(40_000.0), "40.0 ms");
        assert_eq!(share(0.833), "83%");
    }
}
