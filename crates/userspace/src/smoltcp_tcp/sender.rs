//! The smoltcp sender: one TCP connection to the kernel in B, polled on
//! the stack's clock, sending the payload stream for a duration and then
//! waiting until the last byte (and its FIN) is acknowledged.
//!
//! # The clock
//!
//! smoltcp is sans-IO: every `poll` takes the time, and `poll_delay` says
//! when it next wants to run (a retransmission timer, a delayed ACK). Both
//! are on the stack's clock: `poll` gets [`StackClock::now`] (on a tick
//! clock, the start of the current tick), and the loop sleeps until the
//! timer is due *on that clock*, the first tick boundary at or after it
//! ([`StackClock::fires_at`]), unless a packet arrives first. Packets are
//! handled as they arrive, timestamped with the tick they arrive in, as a
//! jiffies kernel timestamps them.

use super::device::TunDevice;
use super::observer::RttStats;
use crate::clock::StackClock;
use crate::error::TransferError;
use crate::payload::PayloadStream;
use crate::sampler::IntervalSampler;
use smoltcp::iface::{Config, Interface, PollResult, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration as StackDuration, Instant as StackInstant};
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest the loop sleeps, so that a stop request is seen promptly.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// How long the handshake may take (smoltcp resends a SYN after its 1 s
/// initial RTO).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// smoltcp's receive buffer: the sender receives nothing but ACKs (and a
/// FIN).
const RX_BUFFER: usize = 64 << 10;

pub struct SenderSetup {
    pub clock: StackClock,
    pub cc: tcp::CongestionControl,
    pub duration: Duration,
    pub interval: Duration,
    /// smoltcp's send buffer (its window can never exceed it).
    pub tx_buffer: usize,
    pub local: Ipv4Addr,
    pub remote: SocketAddrV4,
    pub mtu: usize,
    /// How long the connection may go without an acknowledgment of new
    /// data once sending has ended (the send buffer may hold many seconds
    /// of data on a slow path, so the limit is on silence, not on the
    /// total).
    pub drain_timeout: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct SenderReport {
    /// Payload bytes smoltcp saw acknowledged.
    pub acked: u64,
    /// From the connection's establishment to the last byte acknowledged.
    pub elapsed: Duration,
    pub rates_bps: Vec<f64>,
    pub rtt: RttStats,
    pub retransmits: u64,
    pub data_segments: u64,
    /// CPU time of the stack's thread over `elapsed`.
    pub cpu_time: Duration,
    pub packets_in: u64,
    pub packets_out: u64,
    pub write_errors: u64,
    /// Iterations of the loop, and how many of them slept.
    pub polls: u64,
    pub sleeps: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Sending,
    Draining,
}

fn stack_instant(now: Duration) -> StackInstant {
    StackInstant::from_micros(now.as_micros() as i64)
}

fn std_duration(d: StackDuration) -> Duration {
    Duration::from_micros(d.total_micros())
}

/// Run the connection to its end (or failure) on the calling thread.
pub fn run(
    fd: OwnedFd,
    setup: SenderSetup,
    stop: &AtomicBool,
) -> Result<SenderReport, TransferError> {
    let clock = setup.clock;
    let mut device = TunDevice::new(fd, setup.mtu);
    let mut config = Config::new(HardwareAddress::Ip);
    config.random_seed = random_seed();
    let mut iface = Interface::new(config, &mut device, stack_instant(clock.now()));
    let mut pushed = Ok(());
    iface.update_ip_addrs(|addrs| {
        pushed = addrs
            .push(IpCidr::new(IpAddress::Ipv4(setup.local), 32))
            .map_err(|_| ());
    });
    pushed.map_err(|_| TransferError::Failed("smoltcp refused its address".into()))?;
    iface
        .routes_mut()
        .add_default_ipv4_route(*setup.remote.ip())
        .map_err(|_| TransferError::Failed("smoltcp's route table is full".into()))?;

    let mut socket = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; RX_BUFFER]),
        tcp::SocketBuffer::new(vec![0; setup.tx_buffer]),
    );
    socket.set_congestion_control(setup.cc);
    socket.set_nagle_enabled(false);
    socket.set_ack_delay(None);
    let mut sockets = SocketSet::new(Vec::new());
    let handle = sockets.add(socket);
    // Any port: the namespace is this connection's alone.
    let local_port = 40_000 + (random_seed() % 20_000) as u16;
    sockets
        .get_mut::<tcp::Socket>(handle)
        .connect(
            iface.context(),
            (IpAddress::Ipv4(*setup.remote.ip()), setup.remote.port()),
            local_port,
        )
        .map_err(|e| TransferError::Failed(format!("smoltcp connect to {}: {e}", setup.remote)))?;

    let begun = Instant::now();
    let mut phase = Phase::Connecting;
    let mut payload = PayloadStream::new();
    let mut established = begun;
    let mut send_until = begun;
    let mut sampler: Option<IntervalSampler> = None;
    let mut cpu_start = Duration::ZERO;
    let mut report = SenderReport::default();
    // The acknowledged count and when it last grew (for the drain limit).
    let mut last_acked = (0u64, begun);
    loop {
        if stop.load(Ordering::SeqCst) || osprobe_core::interrupt::requested() {
            sockets.get_mut::<tcp::Socket>(handle).abort();
            return Err(TransferError::Interrupted);
        }
        let real_now = Instant::now();
        let socket = sockets.get_mut::<tcp::Socket>(handle);
        match phase {
            Phase::Connecting => {
                if socket.state() == tcp::State::Established {
                    phase = Phase::Sending;
                    established = real_now;
                    send_until = real_now + setup.duration;
                    sampler = Some(IntervalSampler::new(real_now, setup.interval, 0));
                    cpu_start = osprobe_net::sock::thread_cpu_time();
                } else if !socket.is_open() {
                    return Err(TransferError::Failed(format!(
                        "smoltcp could not connect to the kernel's TCP at {} (refused or reset)",
                        setup.remote
                    )));
                } else if real_now.duration_since(begun) > CONNECT_TIMEOUT {
                    return Err(TransferError::Failed(format!(
                        "smoltcp's handshake with {} did not finish within {CONNECT_TIMEOUT:?}",
                        setup.remote
                    )));
                }
            }
            Phase::Sending if real_now >= send_until => {
                socket.close();
                phase = Phase::Draining;
            }
            Phase::Sending => {
                while socket.can_send() {
                    let queued = socket
                        .send(|buf| {
                            payload.fill(buf);
                            (buf.len(), buf.len())
                        })
                        .map_err(|e| TransferError::Failed(format!("smoltcp send: {e}")))?;
                    if queued == 0 {
                        break;
                    }
                }
            }
            Phase::Draining => {}
        }
        if phase == Phase::Draining {
            match socket.state() {
                tcp::State::FinWait2 | tcp::State::TimeWait => break,
                tcp::State::Closed => {
                    return Err(TransferError::Failed(format!(
                        "the connection was reset with {} of {} bytes acknowledged",
                        payload.offset() - socket.send_queue() as u64,
                        payload.offset()
                    )))
                }
                _ if real_now > last_acked.1.max(send_until) + setup.drain_timeout => {
                    let left = socket.send_queue();
                    socket.abort();
                    return Err(TransferError::Failed(format!(
                        "smoltcp's last {left} bytes: no acknowledgment for {:?} after sending ended",
                        setup.drain_timeout
                    )));
                }
                _ => {}
            }
        }

        let now = clock.now();
        let packets_before = device.packets_in + device.packets_out;
        let result = iface.poll(stack_instant(now), &mut device, &mut sockets);
        report.polls += 1;
        if let Some(e) = device.read_error.take() {
            return Err(TransferError::io("reading smoltcp's TUN device", e));
        }
        let progressed = result == PollResult::SocketStateChanged
            || device.packets_in + device.packets_out != packets_before;
        let acked = payload.offset() - sockets.get::<tcp::Socket>(handle).send_queue() as u64;
        if acked > last_acked.0 {
            last_acked = (acked, real_now);
        }
        if phase == Phase::Sending {
            if let Some(s) = sampler.as_mut() {
                s.record(Instant::now(), acked);
            }
        }
        if progressed {
            continue;
        }
        // Nothing happened: sleep until a packet arrives, smoltcp's next
        // timer fires on the stack's clock, or the loop has something to
        // do (a sample, the end of sending).
        let real = Instant::now();
        let mut wait = MAX_WAIT;
        if let Some(delay) = iface.poll_delay(stack_instant(now), &sockets) {
            let due = clock.fires_at(now + std_duration(delay));
            let elapsed = real.duration_since(clock.origin());
            wait = wait.min(due.saturating_sub(elapsed));
        }
        if phase == Phase::Sending {
            wait = wait.min(send_until.saturating_duration_since(real));
            if let Some(s) = &sampler {
                wait = wait.min(s.next_due().saturating_duration_since(real));
            }
        }
        if wait.is_zero() {
            // Due now but nothing moved (the stack's time has not reached
            // the timer yet within this tick, or a timer it will handle on
            // the next poll): yield briefly rather than spin.
            wait = Duration::from_micros(20);
        }
        report.sleeps += 1;
        osprobe_link::tun::wait_readable(device.raw_fd(), wait.as_nanos() as u64)
            .map_err(|e| TransferError::io("waiting on smoltcp's TUN device", e))?;
    }
    let end = Instant::now();
    report.cpu_time = osprobe_net::sock::thread_cpu_time().saturating_sub(cpu_start);
    report.acked = payload.offset() - sockets.get::<tcp::Socket>(handle).send_queue() as u64;
    report.elapsed = end.duration_since(established);
    report.rates_bps = sampler.map(|s| s.into_rates()).unwrap_or_default();
    report.rtt = device.observer.rtt.clone();
    report.retransmits = device.observer.retransmits;
    report.data_segments = device.observer.data_segments;
    report.packets_in = device.packets_in;
    report.packets_out = device.packets_out;
    report.write_errors = device.write_errors;
    Ok(report)
}

fn random_seed() -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    osprobe_core::random::SplitMix64::new(wall ^ u64::from(std::process::id())).next_u64()
}
