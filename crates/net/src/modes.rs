//! The server's roles of the network modes iperf3 and netperf users expect,
//! and what both ends share about them:
//!
//! - `source` (iperf3 -R): the server sends on each stream for the test's
//!   duration, then closes its half.
//! - `udp_sink` (iperf3 -u): datagrams to a UDP port of this session alone;
//!   the server counts them, their reordering and their jitter.
//! - `crr` (netperf TCP_CRR): a TCP listener of this session alone; each
//!   connection brings one request and takes one response.
//!
//! A session-scoped port is announced on stream 0 right after `Attached`,
//! as two big-endian bytes, and lives until stream 0 closes or the session
//! ends. It serves the session's client address only (anything else is
//! dropped unread or closed at once), one connection or datagram at a time,
//! so it adds no resource a stranger can hold.
//!
//! A UDP datagram starts with [`UDP_HEADER`] bytes: the session id (16), a
//! sequence number (8) and the sender's send time in ns (8), big-endian.

use crate::protocol::{StreamReport, UdpCounts};
use crate::stream_error::RoleError;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use crate::protocol::UDP_HEADER;
/// The receive buffer asked for the session's UDP socket (the kernel caps
/// it at net.core.rmem_max): a burst of small datagrams must not be lost
/// in the receiver's own socket before the thread reads it.
const UDP_RECEIVE_BUFFER: i32 = 4 << 20;
/// How often a waiting role looks at the session's end.
const POLL: Duration = Duration::from_millis(200);

/// The header of a test datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader {
    pub session: [u8; 16],
    pub sequence: u64,
    pub sent_ns: u64,
}

impl DatagramHeader {
    pub fn write(&self, buf: &mut [u8]) {
        buf[..16].copy_from_slice(&self.session);
        buf[16..24].copy_from_slice(&self.sequence.to_be_bytes());
        buf[24..32].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// The header of `buf`, or None when it is too short to hold one.
    pub fn read(buf: &[u8]) -> Option<DatagramHeader> {
        if buf.len() < UDP_HEADER {
            return None;
        }
        let mut session = [0u8; 16];
        session.copy_from_slice(&buf[..16]);
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[at..at + 8]);
            u64::from_be_bytes(b)
        };
        Some(DatagramHeader {
            session,
            sequence: word(16),
            sent_ns: word(24),
        })
    }
}

/// The receiver's arithmetic of a UDP test (iperf3's definitions): a
/// datagram whose sequence number is below the highest seen is reordered;
/// jitter is RFC 3550's running estimate of the variation in transit time
/// (arrival minus send time; the clocks' offset cancels out), J += (|D| -
/// J) / 16.
#[derive(Debug, Clone, Default)]
pub struct UdpCounter {
    pub counts: UdpCounts,
    last_transit: Option<i128>,
}

impl UdpCounter {
    pub fn record(&mut self, header: &DatagramHeader, len: usize, arrival_ns: u64) {
        let c = &mut self.counts;
        c.datagrams += 1;
        c.bytes += len as u64;
        if header.sequence < c.highest {
            c.reordered += 1;
        } else {
            c.highest = header.sequence.saturating_add(1);
        }
        let transit = arrival_ns as i128 - header.sent_ns as i128;
        if let Some(last) = self.last_transit {
            let d = (transit - last).unsigned_abs() as f64;
            c.jitter_ns += (d - c.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
    }
}

/// Write the session-scoped port on stream 0.
fn announce(mut stream: &TcpStream, port: u16) -> Result<(), RoleError> {
    stream
        .write_all(&port.to_be_bytes())
        .map_err(|e| RoleError::io("announcing the port", e))
}

/// Read the port the server announced on stream 0 (client side).
pub fn read_announced_port(mut stream: &TcpStream, timeout: Duration) -> io::Result<u16> {
    stream.set_read_timeout(Some(timeout))?;
    let mut port = [0u8; 2];
    stream.read_exact(&mut port)?;
    stream.set_read_timeout(None)?;
    match u16::from_be_bytes(port) {
        0 => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the server announced port 0",
        )),
        p => Ok(p),
    }
}

/// Whether stream 0 has closed (EOF or error); bytes the client sends on
/// it are read and ignored.
fn control_closed(mut stream: &TcpStream) -> bool {
    let mut scratch = [0u8; 64];
    match stream.read(&mut scratch) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        ),
    }
}

/// Poll `fds` for input for up to `timeout`; the revents of each.
fn poll_in(fds: &[i32], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfds is a valid array of pollfd of the length passed.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// The source role: write `write_size` bytes at a time for `duration`
/// (from the first write), then close this half; the client closing first
/// ends it early without error.
pub fn source(
    mut stream: &TcpStream,
    write_size: usize,
    duration: Duration,
    cpu: Option<u32>,
    closed: &AtomicBool,
) -> Result<StreamReport, RoleError> {
    if let Some(cpu) = cpu {
        // A CPU this process may not use is ignored, as for the sink.
        let allowed = osprobe_core::affinity::allowed_cpus().unwrap_or_default();
        if allowed.contains(&(cpu as usize)) {
            let _ = osprobe_core::affinity::pin_current_thread(cpu as usize);
        }
    }
    let buf = crate::sock::PageAligned::filled(write_size, 0x5a);
    let mut report = StreamReport::default();
    // A client that stops reading must not hold the thread past the session.
    let _ = stream.set_write_timeout(Some(POLL));
    let started = Instant::now();
    let deadline = started + duration;
    while Instant::now() < deadline && !closed.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(n) => {
                report.bytes += n as u64;
                report.reads += 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                ) => {}
            // The client went away first: what was sent stands.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                break
            }
            Err(e) => return Err(RoleError::io("sending", e)),
        }
    }
    report.elapsed_ns = started.elapsed().as_nanos() as u64;
    report.tcp_info = crate::tcp_info::tcp_info(stream.as_raw_fd())
        .ok()
        .and_then(|info| serde_json::to_value(info).ok());
    let _ = stream.shutdown(Shutdown::Write);
    Ok(report)
}

/// The udp_sink role on stream 0: a UDP socket of this session on the
/// stream's local address, announced to the client; count every datagram
/// from the client's address that carries the session id, until stream 0
/// closes.
pub fn udp_sink(
    stream: &TcpStream,
    session: [u8; 16],
    client: IpAddr,
    size: usize,
    closed: &AtomicBool,
) -> Result<StreamReport, RoleError> {
    let local = stream
        .local_addr()
        .map_err(|e| RoleError::io("local address", e))?;
    let socket = UdpSocket::bind(SocketAddr::new(local.ip(), 0))
        .map_err(|e| RoleError::io("binding the session's UDP port", e))?;
    let _ = crate::sock::set_int(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        UDP_RECEIVE_BUFFER,
    );
    socket
        .set_nonblocking(true)
        .map_err(|e| RoleError::io("UDP socket", e))?;
    let port = socket
        .local_addr()
        .map_err(|e| RoleError::io("UDP port", e))?
        .port();
    announce_then_poll(stream, port)?;
    let epoch = Instant::now();
    let mut counter = UdpCounter::default();
    let mut buf = vec![0u8; size.max(UDP_HEADER) + 1];
    let (mut first, mut last) = (None, None);
    loop {
        if closed.load(Ordering::Relaxed) {
            return Err(RoleError::SessionEnded);
        }
        let ready = poll_in(&[socket.as_raw_fd(), stream.as_raw_fd()], POLL)
            .map_err(|e| RoleError::io("poll", e))?;
        if ready[0] {
            loop {
                match socket.recv_from(&mut buf) {
                    Ok((len, from)) => {
                        let arrival = Instant::now();
                        let Some(header) = DatagramHeader::read(&buf[..len]) else {
                            continue;
                        };
                        if from.ip() != client || header.session != session || len != size {
                            continue;
                        }
                        first.get_or_insert(arrival);
                        last = Some(arrival);
                        let arrival_ns = arrival.duration_since(epoch).as_nanos() as u64;
                        counter.record(&header, len, arrival_ns);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ICMP errors of earlier sends and the like: not ours.
                    Err(_) => break,
                }
            }
        }
        if ready[1] && control_closed(stream) {
            break;
        }
    }
    Ok(StreamReport {
        bytes: counter.counts.bytes,
        reads: counter.counts.datagrams,
        elapsed_ns: match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f).as_nanos() as u64,
            _ => 0,
        },
        udp: Some(counter.counts),
        ..StreamReport::default()
    })
}

/// Announce the port, then make stream 0 non-blocking: from here it is
/// only watched for its end.
fn announce_then_poll(stream: &TcpStream, port: u16) -> Result<(), RoleError> {
    announce(stream, port)?;
    stream
        .set_nonblocking(true)
        .map_err(|e| RoleError::io("stream 0", e))
}

/// The crr role on stream 0: a listener of this session on the stream's
/// local address, announced to the client; each connection from the
/// client's address gets its `size`-byte request answered with `size`
/// bytes, then the server closes (so the client's ports do not linger in
/// TIME_WAIT). One connection at a time, until stream 0 closes.
pub fn crr(
    stream: &TcpStream,
    client: IpAddr,
    size: usize,
    idle: Duration,
    closed: &AtomicBool,
) -> Result<StreamReport, RoleError> {
    let local = stream
        .local_addr()
        .map_err(|e| RoleError::io("local address", e))?;
    let listener = TcpListener::bind(SocketAddr::new(local.ip(), 0))
        .map_err(|e| RoleError::io("binding the session's listener", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| RoleError::io("listener", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| RoleError::io("listener port", e))?
        .port();
    announce_then_poll(stream, port)?;
    let mut report = StreamReport::default();
    let mut buf = vec![0u8; size];
    let (mut first, mut last) = (None, None);
    loop {
        if closed.load(Ordering::Relaxed) {
            return Err(RoleError::SessionEnded);
        }
        let ready = poll_in(&[listener.as_raw_fd(), stream.as_raw_fd()], POLL)
            .map_err(|e| RoleError::io("poll", e))?;
        if ready[0] {
            loop {
                let (conn, from) = match listener.accept() {
                    Ok(pair) => pair,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => break,
                };
                if from.ip() != client {
                    continue; // dropped: closed at once
                }
                first.get_or_insert_with(Instant::now);
                match transaction(&conn, &mut buf, idle) {
                    Ok(()) => {
                        report.reads += 1;
                        report.bytes += size as u64;
                        last = Some(Instant::now());
                    }
                    // A client that gives up mid-transaction costs it that
                    // transaction, not the test.
                    Err(_) => continue,
                }
            }
        }
        if ready[1] && control_closed(stream) {
            break;
        }
    }
    report.elapsed_ns = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_nanos() as u64,
        _ => 0,
    };
    Ok(report)
}

/// One CRR transaction on an accepted connection: read the request, write
/// the response, close.
fn transaction(conn: &TcpStream, buf: &mut [u8], idle: Duration) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(idle))?;
    conn.set_write_timeout(Some(idle))?;
    let mut conn_ref = conn;
    conn_ref.read_exact(buf)?;
    conn_ref.write_all(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(sequence: u64, sent_ns: u64) -> DatagramHeader {
        DatagramHeader {
            session: [7; 16],
            sequence,
            sent_ns,
        }
    }

    #[test]
    fn a_header_round_trips_and_a_short_datagram_has_none() {
        let h = header(42, 123_456_789);
        let mut buf = [0u8; UDP_HEADER];
        h.write(&mut buf);
        assert_eq!(DatagramHeader::read(&buf), Some(h));
        assert_eq!(DatagramHeader::read(&buf[..UDP_HEADER - 1]), None);
    }

    #[test]
    fn steady_arrivals_have_no_jitter_and_no_reordering() {
        let mut c = UdpCounter::default();
        for i in 0..100 {
            c.record(&header(i, i * 1000), 64, 5_000 + i * 1000);
        }
        assert_eq!(c.counts.datagrams, 100);
        assert_eq!(c.counts.bytes, 6400);
        assert_eq!(c.counts.reordered, 0);
        assert_eq!(c.counts.highest, 100);
        assert_eq!(c.counts.jitter_ns, 0.0);
    }

    #[test]
    fn a_late_datagram_counts_as_reordered_and_a_gap_shows_in_highest() {
        let mut c = UdpCounter::default();
        for (seq, at) in [(0, 0), (2, 2000), (1, 2100), (5, 5000)] {
            c.record(&header(seq, seq * 1000), 64, at);
        }
        assert_eq!(c.counts.reordered, 1);
        assert_eq!(c.counts.highest, 6);
        assert_eq!(c.counts.datagrams, 4);
    }

    #[test]
    fn jitter_follows_rfc_3550s_running_estimate() {
        let mut c = UdpCounter::default();
        // Transit times 1000, 1160, 1000: |D| = 160 twice.
        c.record(&header(0, 0), 64, 1000);
        c.record(&header(1, 1000), 64, 2160);
        c.record(&header(2, 2000), 64, 3000);
        let once = 160.0 / 16.0;
        let twice = once + (160.0 - once) / 16.0;
        assert!((c.counts.jitter_ns - twice).abs() < 1e-9);
    }
}
