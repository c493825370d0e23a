//! One QUIC endpoint's event loop on its own thread: a quinn-proto
//! `Endpoint` and its one `Connection` over a nonblocking UDP socket.
//!
//! Every `now` quinn-proto is given comes from `StackClock::now_instant()`,
//! so on a tick clock the library sees time move in ticks. The loop's only
//! wait is a ppoll on the socket until the connection's next timer, mapped
//! through `StackClock::fires_at_instant` (on a tick clock a timer fires at
//! the first tick boundary at or after its deadline, as a jiffies timer).

use super::app::{App, CLOSE_DONE};
use super::error::EndpointError;
use super::udp::{Udp, GSO_BYTES, GSO_SEGMENTS};
use crate::clock::StackClock;
use bytes::{Bytes, BytesMut};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event,
    ServerConfig,
};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which end this thread is.
pub enum Role {
    Client {
        server: SocketAddr,
        config: ClientConfig,
    },
    Server {
        config: Arc<ServerConfig>,
    },
}

/// How long the client keeps answering after it closed, so that its close
/// reaches the server even if the first copy is lost.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// What one endpoint's loop leaves behind.
pub struct Finished<A> {
    pub app: A,
    /// The connection's final statistics (None: it never existed).
    pub stats: Option<quinn_proto::ConnectionStats>,
    pub srtt: Option<Duration>,
    pub min_rtt: Option<Duration>,
    /// CPU time of this thread (user + system).
    pub cpu: Duration,
    /// How late the loop's timed waits ended when no datagram came first:
    /// the cost of the transport's own timer.
    pub timer_late: TimerLateness,
}

/// Lateness of the driver's timer wake-ups (the ppoll timeouts that
/// expired), in ns, at most `MAX_LATENESS_SAMPLES` kept.
#[derive(Debug, Default, Clone)]
pub struct TimerLateness {
    pub samples_ns: Vec<u64>,
    pub total: u64,
}

const MAX_LATENESS_SAMPLES: usize = 100_000;

impl TimerLateness {
    fn record(&mut self, late: Duration) {
        self.total += 1;
        if self.samples_ns.len() < MAX_LATENESS_SAMPLES {
            self.samples_ns
                .push(u64::try_from(late.as_nanos()).unwrap_or(u64::MAX));
        }
    }

    /// The p-th percentile (0..=100) of the kept samples.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        if self.samples_ns.is_empty() {
            return None;
        }
        let mut sorted = self.samples_ns.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        Some(Duration::from_nanos(sorted[rank.min(sorted.len() - 1)]))
    }
}

/// Runs the endpoint until the application is done and the connection
/// closed, the deadline passes, or `abort` is set by the other thread.
pub fn run<A: App>(
    udp: Udp,
    role: Role,
    clock: StackClock,
    mut app: A,
    deadline: Instant,
    abort: &AtomicBool,
    max_udp_payload: u16,
) -> Result<Finished<A>, EndpointError> {
    let cpu_start = thread_cpu();
    let mut driver = Driver::new(udp, &role, clock, max_udp_payload)?;
    if let Role::Client { server, config } = role {
        let now = clock.now_instant();
        let (handle, conn) = driver
            .endpoint
            .connect(now, config, server, super::tls::SERVER_NAME)
            .map_err(EndpointError::quic(format!("connecting to {server}")))?;
        driver.conn = Some((handle, conn));
    }
    let mut closed_at: Option<Instant> = None;
    let mut connected = false;
    loop {
        check_going(abort, deadline, &app)?;
        driver.receive()?;
        let now = clock.now_instant();
        let Some((handle, conn)) = driver.conn.as_mut() else {
            driver.wait(None, deadline)?;
            continue;
        };
        let handle = *handle;
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        handle_events(&mut driver.endpoint, handle, conn, &mut app, &mut connected)?;
        if connected {
            app.pump(conn)?;
        }
        if app.done() && closed_at.is_none() && driver.is_client {
            conn.close(clock.now_instant(), CLOSE_DONE, Bytes::from_static(b"done"));
            closed_at = Some(Instant::now());
        }
        driver.transmit()?;
        let (_, conn) = driver.conn.as_mut().expect("checked above");
        let over = if driver.is_client {
            conn.is_drained() || closed_at.is_some_and(|t| t.elapsed() >= CLOSE_LINGER)
        } else {
            app.done() && (conn.is_closed() || conn.is_drained())
        };
        if over {
            break;
        }
        let timer = conn.poll_timeout();
        driver.wait(timer, deadline)?;
    }
    Ok(driver.finished(app, cpu_start))
}

/// Whether the loop may go on: not interrupted, the other endpoint still
/// running, the deadline not passed.
fn check_going<A: App>(
    abort: &AtomicBool,
    deadline: Instant,
    app: &A,
) -> Result<(), EndpointError> {
    if osprobe_core::interrupt::requested() {
        return Err(EndpointError::Interrupted);
    }
    if abort.load(Ordering::Relaxed) {
        return Err(EndpointError::OtherEndpointFailed);
    }
    if Instant::now() >= deadline {
        return Err(EndpointError::Deadline {
            progress: app.progress(),
        });
    }
    Ok(())
}

/// The connection's events: those for the endpoint passed on (and their
/// replies back), those for the application handed to it. A lost
/// connection fails the loop unless the application was done.
fn handle_events<A: App>(
    endpoint: &mut Endpoint,
    handle: ConnectionHandle,
    conn: &mut Connection,
    app: &mut A,
    connected: &mut bool,
) -> Result<(), EndpointError> {
    while let Some(event) = conn.poll_endpoint_events() {
        if let Some(reply) = endpoint.handle_event(handle, event) {
            conn.handle_event(reply);
        }
    }
    while let Some(event) = conn.poll() {
        match event {
            Event::Connected => {
                *connected = true;
                app.on_connected(conn)?;
            }
            Event::Stream(e) => app.on_stream_event(conn, e)?,
            Event::ConnectionLost { reason } if !app.done() => {
                return Err(EndpointError::ConnectionLost(reason));
            }
            _ => {}
        }
    }
    Ok(())
}

struct Driver {
    udp: Udp,
    endpoint: Endpoint,
    conn: Option<(ConnectionHandle, Connection)>,
    clock: StackClock,
    is_client: bool,
    server_config: Option<Arc<ServerConfig>>,
    recv_buf: BytesMut,
    send_buf: Vec<u8>,
    /// A transmit the socket refused for now (EAGAIN): its destination,
    /// segment size and bytes are kept until the socket is writable.
    pending: Option<(SocketAddr, Option<usize>, Vec<u8>)>,
    scratch: Vec<u8>,
    timer_late: TimerLateness,
}

impl Driver {
    /// What the loop leaves behind once the connection is over.
    fn finished<A>(self, app: A, cpu_start: Duration) -> Finished<A> {
        let (_, conn) = self.conn.as_ref().expect("the loop ends with a connection");
        let path = conn.stats().path;
        Finished {
            app,
            stats: Some(conn.stats()),
            srtt: Some(path.rtt),
            min_rtt: Some(conn.min_rtt()),
            cpu: thread_cpu().saturating_sub(cpu_start),
            timer_late: self.timer_late,
        }
    }

    fn new(
        udp: Udp,
        role: &Role,
        clock: StackClock,
        max_udp_payload: u16,
    ) -> Result<Driver, EndpointError> {
        let (server_config, is_client) = match role {
            Role::Client { .. } => (None, true),
            Role::Server { config } => (Some(config.clone()), false),
        };
        // What this endpoint accepts from its peer (quinn's default is a
        // 1500-byte Ethernet MTU's 1472).
        let mut endpoint_config = EndpointConfig::default();
        endpoint_config
            .max_udp_payload_size(max_udp_payload.max(1200))
            .map_err(EndpointError::quic(format!(
                "max UDP payload {max_udp_payload}"
            )))?;
        let endpoint = Endpoint::new(Arc::new(endpoint_config), server_config.clone(), true, None);
        Ok(Driver {
            udp,
            endpoint,
            conn: None,
            clock,
            is_client,
            server_config,
            recv_buf: BytesMut::with_capacity(super::udp::RECV_BUFFER),
            send_buf: Vec::new(),
            pending: None,
            scratch: Vec::new(),
            timer_late: TimerLateness::default(),
        })
    }

    /// Hand every datagram waiting on the socket to the endpoint.
    fn receive(&mut self) -> Result<(), EndpointError> {
        // Bounded, so that a flood of input cannot starve the timers and
        // the sending side of this loop.
        for _ in 0..256 {
            let (from, segment) = match self.udp.recv(&mut self.recv_buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error reported on the socket (the peer's port
                // not open yet): not fatal for UDP.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(EndpointError::socket("receiving on the UDP socket")(e)),
            };
            let mut batch = self.recv_buf.split();
            let size = segment.unwrap_or(batch.len()).max(1);
            let now = self.clock.now_instant();
            while !batch.is_empty() {
                let datagram = batch.split_to(size.min(batch.len()));
                self.handle_datagram(now, from, datagram)?;
            }
        }
        Ok(())
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: BytesMut,
    ) -> Result<(), EndpointError> {
        self.scratch.clear();
        match self
            .endpoint
            .handle(now, from, None, None, datagram, &mut self.scratch)
        {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some((h, conn)) = self.conn.as_mut() {
                    if *h == handle {
                        conn.handle_event(event);
                    }
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.conn.is_some() || self.is_client {
                    // One transfer, one connection: anything else is refused.
                    let t = self.endpoint.refuse(incoming, &mut self.scratch);
                    self.send_now(t.destination, None, t.size);
                    return Ok(());
                }
                self.scratch.clear();
                match self.endpoint.accept(
                    incoming,
                    now,
                    &mut self.scratch,
                    self.server_config.clone(),
                ) {
                    Ok((handle, conn)) => self.conn = Some((handle, conn)),
                    Err(e) => {
                        if let Some(t) = e.response {
                            self.send_now(t.destination, None, t.size);
                        }
                        return Err(EndpointError::quic("accepting the connection")(e.cause));
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => self.send_now(t.destination, None, t.size),
            None => {}
        }
        Ok(())
    }

    /// Send what the endpoint wrote into `scratch` (stateless replies);
    /// lost if the socket is full, as any datagram may be.
    fn send_now(&self, to: SocketAddr, segment: Option<usize>, size: usize) {
        let _ = self.udp.send(to, &self.scratch[..size], segment);
    }

    /// Send everything the connection has to send now.
    fn transmit(&mut self) -> Result<(), EndpointError> {
        if !self.flush_pending()? {
            return Ok(());
        }
        let Some((_, conn)) = self.conn.as_mut() else {
            return Ok(());
        };
        // One GSO send is at most 64 KB in all: with large packets (the
        // emulated path's 64 KB MTU) that is one datagram.
        let max_datagrams = if self.udp.gso {
            (GSO_BYTES / usize::from(conn.current_mtu()).max(1)).clamp(1, GSO_SEGMENTS)
        } else {
            1
        };
        loop {
            self.send_buf.clear();
            let now = self.clock.now_instant();
            let Some(t) = conn.poll_transmit(now, max_datagrams, &mut self.send_buf) else {
                return Ok(());
            };
            match self
                .udp
                .send(t.destination, &self.send_buf[..t.size], t.segment_size)
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.pending = Some((
                        t.destination,
                        t.segment_size,
                        self.send_buf[..t.size].to_vec(),
                    ));
                    return Ok(());
                }
                // EIO: the device cannot segment; send one by one from now on.
                Err(e) if e.raw_os_error() == Some(libc::EIO) && t.segment_size.is_some() => {
                    self.udp.gso = false;
                    let segment = t.segment_size.expect("checked");
                    for piece in self.send_buf[..t.size].chunks(segment) {
                        self.udp
                            .send(t.destination, piece, None)
                            .map_err(EndpointError::socket("sending a datagram"))?;
                    }
                    return Ok(());
                }
                Err(e) => return Err(EndpointError::socket("sending on the UDP socket")(e)),
            }
        }
    }

    /// Retry the transmit the socket refused; true when nothing is pending.
    fn flush_pending(&mut self) -> Result<bool, EndpointError> {
        let Some((to, segment, data)) = self.pending.take() else {
            return Ok(true);
        };
        match self.udp.send(to, &data, segment) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.pending = Some((to, segment, data));
                Ok(false)
            }
            Err(e) => Err(EndpointError::socket("sending on the UDP socket")(e)),
        }
    }

    /// Sleep until input, the socket's room for a pending transmit, the
    /// connection's next timer on the stack's clock, or the deadline.
    fn wait(&mut self, timer: Option<Instant>, deadline: Instant) -> Result<(), EndpointError> {
        let fires = timer.map(|t| self.clock.fires_at_instant(t));
        let until = fires.map_or(deadline, |f| f.min(deadline));
        if until <= Instant::now() {
            return Ok(());
        }
        let ready = self
            .udp
            .wait(Some(until), self.pending.is_some())
            .map_err(EndpointError::socket("waiting on the UDP socket"))?;
        if !ready && fires.is_some() {
            self.timer_late
                .record(Instant::now().saturating_duration_since(until));
        }
        Ok(())
    }
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu() -> Duration {
    osprobe_core::sys::thread_cpu_time()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_percentiles_come_from_the_kept_samples() {
        let mut late = TimerLateness::default();
        assert_eq!(late.percentile(50.0), None);
        for us in [5u64, 1, 3, 2, 4] {
            late.record(Duration::from_micros(us));
        }
        assert_eq!(late.total, 5);
        assert_eq!(late.percentile(0.0), Some(Duration::from_micros(1)));
        assert_eq!(late.percentile(50.0), Some(Duration::from_micros(3)));
        assert_eq!(late.percentile(100.0), Some(Duration::from_micros(5)));
    }
}
