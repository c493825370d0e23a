//! What one transfer over a stack measured, whichever stack it was: the
//! smoltcp TCP, the quinn-proto QUIC or the kernel's TCP baseline all
//! return a `TransferOutcome`, and `net.userspace` turns it into
//! measurements.

use crate::clock::ClockMode;
use std::time::Duration;

/// The path a transfer crosses: the link emulator's impairments, as
/// `osprobe net --delay/--loss/--rate/--wmem` take them.
#[derive(Debug, Clone, PartialEq)]
pub struct PathConfig {
    /// One-way delay each way.
    pub delay: Duration,
    /// Loss on the data direction (sender -> receiver), in percent.
    pub loss_percent: f64,
    /// Bottleneck rate each way in bit/s; None: no bottleneck.
    pub rate_bps: Option<u64>,
    /// Socket buffer ceiling for the kernel's side (tcp_wmem/tcp_rmem
    /// maximum) in bytes; None: the namespaces' defaults.
    pub wmem: Option<u64>,
    /// The MTU of the path's devices: 1500 as the talk's packets, or up to
    /// 65535 so that stacks without segmentation offload are not held to
    /// a trip per 1500 bytes.
    pub mtu: u32,
}

/// One transfer to run.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferConfig {
    /// The clock the user-space stack sees (ignored by the kernel's TCP,
    /// which runs on the kernel's own clock).
    pub clock: ClockMode,
    /// The congestion control by its osprobe name: `reno`, `cubic`, `bbr`
    /// (`newreno` is accepted for QUIC as its Reno).
    pub cc: String,
    /// How long the sender sends.
    pub duration: Duration,
    /// The width of one throughput sample.
    pub interval: Duration,
    pub path: PathConfig,
}

/// What a transfer measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TransferOutcome {
    /// Payload bytes the receiver got and the sender saw acknowledged.
    pub bytes: u64,
    /// From the first byte sent to the last acknowledged.
    pub elapsed: Duration,
    /// Acknowledged payload per `interval`, in bit/s, one per interval
    /// (the first interval, the ramp-up, included; the experiment decides
    /// what to skip).
    pub throughput_bps: Vec<f64>,
    /// The stack's own minimum RTT estimate at the end, as the stack saw
    /// it on its clock (zero is a real answer on a tick clock).
    pub min_rtt: Option<Duration>,
    /// The stack's own smoothed RTT at the end.
    pub srtt: Option<Duration>,
    /// Segments or packets the sender sent again.
    pub retransmits: u64,
    /// CPU time (user + system) of the threads running the user-space
    /// stack, both ends where both are in user space.
    pub cpu_time: Duration,
    /// The receiver's hash of what it received matched the sender's.
    pub verified: bool,
    /// Plain-language notes (e.g. where a library hides its RTT samples).
    pub notes: Vec<String>,
}
