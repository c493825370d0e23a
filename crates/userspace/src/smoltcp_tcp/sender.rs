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
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
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
    let mut sender = Sender::connect(fd, setup)?;
    loop {
        if stop.load(Ordering::SeqCst) || osprobe_core::interrupt::requested() {
            sender.socket().abort();
            return Err(TransferError::Interrupted);
        }
        let real_now = Instant::now();
        if sender.advance(real_now)? == Flow::Done {
            break;
        }
        let now = sender.setup.clock.now();
        if !sender.poll(now, real_now)? {
            sender.sleep(now)?;
        }
    }
    Ok(sender.finish())
}

/// Whether the loop goes on after a phase's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// The FIN is acknowledged: the transfer is over.
    Done,
}

/// The connection's state between the loop's steps.
struct Sender {
    setup: SenderSetup,
    device: TunDevice,
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    phase: Phase,
    payload: PayloadStream,
    begun: Instant,
    established: Instant,
    send_until: Instant,
    sampler: Option<IntervalSampler>,
    cpu_start: Duration,
    report: SenderReport,
    /// The acknowledged count and when it last grew (for the drain limit).
    last_acked: (u64, Instant),
}

impl Sender {
    /// smoltcp's interface with its address and default route, and a TCP
    /// socket connecting to the receiver.
    fn connect(fd: OwnedFd, setup: SenderSetup) -> Result<Sender, TransferError> {
        let mut device = TunDevice::new(fd, setup.mtu);
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = random_seed();
        let mut iface = Interface::new(config, &mut device, stack_instant(setup.clock.now()));
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
            .map_err(TransferError::stack("smoltcp's default route"))?;

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
            .map_err(TransferError::stack(format!(
                "smoltcp connect to {}",
                setup.remote
            )))?;
        let begun = Instant::now();
        Ok(Sender {
            setup,
            device,
            iface,
            sockets,
            handle,
            phase: Phase::Connecting,
            payload: PayloadStream::new(),
            begun,
            established: begun,
            send_until: begun,
            sampler: None,
            cpu_start: Duration::ZERO,
            report: SenderReport::default(),
            last_acked: (0, begun),
        })
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }

    /// Payload bytes smoltcp has seen acknowledged.
    fn acked(&self) -> u64 {
        self.payload.offset() - self.sockets.get::<tcp::Socket>(self.handle).send_queue() as u64
    }

    /// The phase's work before a poll: notice the connection, queue
    /// payload, close when sending ends, and end the transfer or fail it
    /// while draining.
    fn advance(&mut self, real_now: Instant) -> Result<Flow, TransferError> {
        match self.phase {
            Phase::Connecting => self.connecting(real_now)?,
            Phase::Sending if real_now >= self.send_until => {
                self.socket().close();
                self.phase = Phase::Draining;
            }
            Phase::Sending => self.queue_payload()?,
            Phase::Draining => {}
        }
        if self.phase == Phase::Draining {
            return self.draining(real_now);
        }
        Ok(Flow::Continue)
    }

    /// Sending starts when the handshake is done; a refused or slow one fails.
    fn connecting(&mut self, real_now: Instant) -> Result<(), TransferError> {
        let remote = self.setup.remote;
        let socket = self.socket();
        if socket.state() == tcp::State::Established {
            self.phase = Phase::Sending;
            self.established = real_now;
            self.send_until = real_now + self.setup.duration;
            self.sampler = Some(IntervalSampler::new(real_now, self.setup.interval, 0));
            self.cpu_start = osprobe_net::sock::thread_cpu_time();
        } else if !socket.is_open() {
            return Err(TransferError::Failed(format!(
                "smoltcp could not connect to the kernel's TCP at {remote} (refused or reset)"
            )));
        } else if real_now.duration_since(self.begun) > CONNECT_TIMEOUT {
            return Err(TransferError::Failed(format!(
                "smoltcp's handshake with {remote} did not finish within {CONNECT_TIMEOUT:?}"
            )));
        }
        Ok(())
    }

    /// Fills the send buffer with the payload stream.
    fn queue_payload(&mut self) -> Result<(), TransferError> {
        let socket = self.sockets.get_mut::<tcp::Socket>(self.handle);
        while socket.can_send() {
            let payload = &mut self.payload;
            let queued = socket
                .send(|buf| {
                    payload.fill(buf);
                    (buf.len(), buf.len())
                })
                .map_err(TransferError::stack("smoltcp send"))?;
            if queued == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Done once the FIN is acknowledged; a reset or a silence longer than
    /// the drain limit fails the transfer.
    fn draining(&mut self, real_now: Instant) -> Result<Flow, TransferError> {
        let sent = self.payload.offset();
        let silent_since = self.last_acked.1.max(self.send_until);
        let drain_timeout = self.setup.drain_timeout;
        let socket = self.socket();
        match socket.state() {
            tcp::State::FinWait2 | tcp::State::TimeWait => Ok(Flow::Done),
            tcp::State::Closed => Err(TransferError::Failed(format!(
                "the connection was reset with {} of {sent} bytes acknowledged",
                sent - socket.send_queue() as u64,
            ))),
            _ if real_now > silent_since + drain_timeout => {
                let left = socket.send_queue();
                socket.abort();
                Err(TransferError::Failed(format!(
                    "smoltcp's last {left} bytes: no acknowledgment for {drain_timeout:?} after sending ended"
                )))
            }
            _ => Ok(Flow::Continue),
        }
    }

    /// One poll of smoltcp at the stack's time `now`, then the acknowledged
    /// count sampled; whether anything moved.
    fn poll(&mut self, now: Duration, real_now: Instant) -> Result<bool, TransferError> {
        let device = &mut self.device;
        let packets_before = device.packets_in + device.packets_out;
        let result = self
            .iface
            .poll(stack_instant(now), device, &mut self.sockets);
        self.report.polls += 1;
        if let Some(e) = device.read_error.take() {
            return Err(TransferError::io("reading smoltcp's TUN device", e));
        }
        let progressed = result == PollResult::SocketStateChanged
            || device.packets_in + device.packets_out != packets_before;
        let acked = self.acked();
        if acked > self.last_acked.0 {
            self.last_acked = (acked, real_now);
        }
        if self.phase == Phase::Sending {
            if let Some(s) = self.sampler.as_mut() {
                s.record(Instant::now(), acked);
            }
        }
        Ok(progressed)
    }

    /// Nothing happened: sleep until a packet arrives, smoltcp's next
    /// timer fires on the stack's clock, or the loop has something to do
    /// (a sample, the end of sending).
    fn sleep(&mut self, now: Duration) -> Result<(), TransferError> {
        let clock = self.setup.clock;
        let real = Instant::now();
        let mut wait = MAX_WAIT;
        if let Some(delay) = self.iface.poll_delay(stack_instant(now), &self.sockets) {
            let due = clock.fires_at(now + std_duration(delay));
            let elapsed = real.duration_since(clock.origin());
            wait = wait.min(due.saturating_sub(elapsed));
        }
        if self.phase == Phase::Sending {
            wait = wait.min(self.send_until.saturating_duration_since(real));
            if let Some(s) = &self.sampler {
                wait = wait.min(s.next_due().saturating_duration_since(real));
            }
        }
        if wait.is_zero() {
            // Due now but nothing moved (the stack's time has not reached
            // the timer yet within this tick, or a timer it will handle on
            // the next poll): yield briefly rather than spin.
            wait = Duration::from_micros(20);
        }
        self.report.sleeps += 1;
        osprobe_link::tun::wait_readable(self.device.raw_fd(), wait.as_nanos() as u64)
            .map_err(|e| TransferError::io("waiting on smoltcp's TUN device", e))?;
        Ok(())
    }

    /// The report of a transfer that ended with its FIN acknowledged.
    fn finish(self) -> SenderReport {
        let end = Instant::now();
        let acked = self.acked();
        let device = self.device;
        SenderReport {
            acked,
            elapsed: end.duration_since(self.established),
            rates_bps: self.sampler.map(|s| s.into_rates()).unwrap_or_default(),
            rtt: device.observer.rtt.clone(),
            retransmits: device.observer.retransmits,
            data_segments: device.observer.data_segments,
            cpu_time: osprobe_net::sock::thread_cpu_time().saturating_sub(self.cpu_start),
            packets_in: device.packets_in,
            packets_out: device.packets_out,
            write_errors: device.write_errors,
            ..self.report
        }
    }
}

fn random_seed() -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    osprobe_core::random::SplitMix64::new(wall ^ u64::from(std::process::id())).next_u64()
}
