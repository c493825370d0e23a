//! ICMP echo ("ping") round trips: the ICMP half of `net.rtt`.
//!
//! The CSE 221 report (section 5.2) compares `ping` with a TCP ping-pong of a 32-byte
//! message; a 32-byte ICMP message is the 8-byte echo header plus 24 bytes of
//! payload, hence [`DEFAULT_PAYLOAD_LEN`].
//!
//! Method: one echo request is sent, the clock (`Instant`, i.e.
//! CLOCK_MONOTONIC) is read just before `sendto` and just after the `recvfrom`
//! that returned the matching echo reply; the difference is the round trip.
//! Two kinds of socket can do this:
//!
//! - An ICMP datagram socket (`socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`),
//!   allowed without privileges when the effective or a supplementary gid lies
//!   within `net.ipv4.ping_group_range`. Root is NOT exempt: the default range
//!   `1 0` is empty and refuses everybody. The kernel writes the identifier
//!   (the socket's "port") and the checksum, and delivers only echo replies
//!   carrying that identifier, without the IP header.
//! - A raw socket (`SOCK_RAW, IPPROTO_ICMP`), which needs CAP_NET_RAW. We set
//!   the identifier (derived from the pid) and the checksum ourselves, and the
//!   socket receives a copy of every ICMP packet the host receives, IP header
//!   included.
//!
//! Traps:
//! - On a raw socket over loopback our own echo request comes back to us, as
//!   do other processes' pings (a concurrent `ping`, another `Pinger`). The
//!   socket therefore installs ICMP_FILTER (only echo replies pass) and every
//!   reply is checked: source address, type, code, checksum, identifier,
//!   sequence and the exact payload, which carries a per-Pinger pattern so
//!   that two Pingers of one process with the same identifier cannot take
//!   each other's replies. Unrelated packets are ignored, at most
//!   [`MAX_IGNORED_PER_PING`] of them, and never past the timeout.
//! - A reply to an earlier request that timed out can arrive later; its
//!   sequence number differs, so it is ignored rather than counted.
//! - Linux delivers the IP header of raw IPv4 packets in network byte order
//!   (unlike the BSDs), with options; the header length comes from IHL and is
//!   checked against the received length before anything is read.
//! - The round trip includes the wake-up of this thread from `ppoll`, so it is
//!   a user-to-user round trip like the TCP ping-pong it is compared with,
//!   not the kernel-to-kernel time.

use std::fs;
use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Payload bytes of a 32-byte ICMP message, as in the CSE 221 report.
pub const DEFAULT_PAYLOAD_LEN: usize = 32 - ICMP_HEADER_LEN;
/// The largest payload that fits an Ethernet MTU of 1500 without
/// fragmentation: 1500 - 20 (IPv4 header) - 8 (ICMP header).
pub const MAX_PAYLOAD_LEN: usize = 1472;
/// The longest wait `ping` accepts for one reply.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// How many unrelated packets one `ping` call ignores before giving up.
pub const MAX_IGNORED_PER_PING: usize = 1000;

const ICMP_HEADER_LEN: usize = 8;
const IPV4_MIN_HEADER_LEN: usize = 20;
const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
/// From linux/icmp.h: the raw-socket option holding a bitmask of ICMP types
/// to drop (bit n set drops type n).
const ICMP_FILTER: libc::c_int = 1;
/// Large enough for any IPv4 datagram, so a reply is never truncated.
const RECV_BUFFER_LEN: usize = 65536;
const PING_GROUP_RANGE_PATH: &str = "/proc/sys/net/ipv4/ping_group_range";

/// Which kind of ICMP socket a [`Pinger`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKind {
    /// `SOCK_DGRAM, IPPROTO_ICMP`: unprivileged, kernel-managed identifier.
    Datagram,
    /// `SOCK_RAW, IPPROTO_ICMP`: needs CAP_NET_RAW, sees all ICMP traffic.
    Raw,
}

impl SocketKind {
    /// A short name for notes and JSON: "datagram" or "raw".
    pub fn as_str(self) -> &'static str {
        match self {
            SocketKind::Datagram => "datagram",
            SocketKind::Raw => "raw",
        }
    }

    fn socket_type(self) -> libc::c_int {
        match self {
            SocketKind::Datagram => libc::SOCK_DGRAM,
            SocketKind::Raw => libc::SOCK_RAW,
        }
    }
}

impl std::fmt::Display for SocketKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sends ICMP echo requests to one IPv4 host and times the replies.
#[derive(Debug)]
pub struct Pinger {
    socket: OwnedFd,
    kind: SocketKind,
    target: Ipv4Addr,
    /// Raw: chosen by us. Datagram: learned from getsockname after the first
    /// send (the kernel picks it); `None` until then.
    identifier: Option<u16>,
    next_sequence: u16,
    /// Mixed into the payload pattern so replies to other Pingers never match.
    salt: u32,
    request: Vec<u8>,
    receive_buffer: Vec<u8>,
}

/// Distinguishes Pingers of one process (tests run several at once).
static INSTANCE_COUNTER: AtomicU16 = AtomicU16::new(0);

impl Pinger {
    /// Opens a Pinger for `target`, preferring the unprivileged datagram
    /// socket and falling back to a raw socket (root or CAP_NET_RAW).
    pub fn open(target: Ipv4Addr) -> io::Result<Pinger> {
        match Pinger::open_with(target, SocketKind::Datagram) {
            Ok(pinger) => Ok(pinger),
            Err(datagram_error) => {
                Pinger::open_with(target, SocketKind::Raw).map_err(|raw_error| {
                    io::Error::new(
                        raw_error.kind(),
                        format!(
                            "cannot open an ICMP socket to ping {target}: {datagram_error}; \
                             {raw_error}"
                        ),
                    )
                })
            }
        }
    }

    /// Opens a Pinger for `target` with the given kind of socket, failing
    /// rather than falling back if that kind is not allowed.
    pub fn open_with(target: Ipv4Addr, kind: SocketKind) -> io::Result<Pinger> {
        if target.is_unspecified() || target.is_broadcast() || target.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot ping {target}: a single unicast IPv4 host is required \
                     (not 0.0.0.0, broadcast or multicast)"
                ),
            ));
        }
        // SAFETY: socket() takes no pointers; the result is checked below.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                kind.socket_type() | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_ICMP,
            )
        };
        if fd < 0 {
            let error = io::Error::last_os_error();
            let needs = match kind {
                SocketKind::Datagram => format!(
                    "needs the effective or a supplementary gid within \
                     net.ipv4.ping_group_range ({})",
                    fs::read_to_string(PING_GROUP_RANGE_PATH)
                        .map(|range| range.trim().replace('\t', " "))
                        .unwrap_or_else(|_| "unreadable".to_string())
                ),
                SocketKind::Raw => "needs root or CAP_NET_RAW".to_string(),
            };
            return Err(io::Error::new(
                error.kind(),
                format!("cannot open an ICMP {kind} socket to ping {target} ({needs}): {error}"),
            ));
        }
        // SAFETY: fd is a freshly created descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };

        let instance = INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let identifier = match kind {
            SocketKind::Raw => {
                install_echo_reply_filter(&socket).map_err(|error| {
                    io::Error::new(
                        error.kind(),
                        format!(
                            "cannot set ICMP_FILTER on the raw socket to ping {target}: {error}"
                        ),
                    )
                })?;
                // The low 16 bits of the pid, as ping(8) does, spread by the
                // instance number so Pingers of one process differ.
                Some((pid as u16) ^ instance.wrapping_mul(0x9e37))
            }
            SocketKind::Datagram => None,
        };
        let clock_bits = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or(0);
        let salt = pid.rotate_left(16) ^ u32::from(instance) ^ clock_bits;

        Ok(Pinger {
            socket,
            kind,
            target,
            identifier,
            next_sequence: 1,
            salt,
            request: Vec::with_capacity(ICMP_HEADER_LEN + MAX_PAYLOAD_LEN),
            receive_buffer: vec![0; RECV_BUFFER_LEN],
        })
    }

    /// Which kind of socket this Pinger uses.
    pub fn kind(&self) -> SocketKind {
        self.kind
    }

    /// The host this Pinger sends to.
    pub fn target(&self) -> Ipv4Addr {
        self.target
    }

    /// Sends one echo request with `payload_len` payload bytes (0..=1472)
    /// and waits up to `timeout` (at most [`MAX_TIMEOUT`]) for its reply.
    /// Returns the round trip; `io::ErrorKind::TimedOut` if no matching
    /// reply arrived in time.
    pub fn ping(&mut self, payload_len: usize, timeout: Duration) -> io::Result<Duration> {
        if payload_len > MAX_PAYLOAD_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ICMP payload length {payload_len} is too large: accepted 0..={MAX_PAYLOAD_LEN} \
                     bytes (default {DEFAULT_PAYLOAD_LEN})"
                ),
            ));
        }
        if timeout > MAX_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ping timeout {timeout:?} is too long: accepted up to {MAX_TIMEOUT:?}"),
            ));
        }
        let sequence = self.next_sequence;
        self.next_sequence = self.next_sequence.wrapping_add(1);
        let identifier = self.identifier.unwrap_or(0);
        encode_echo_request(
            &mut self.request,
            identifier,
            sequence,
            payload_len,
            self.salt,
        );

        let sent_at = Instant::now();
        self.send_request()?;
        if self.identifier.is_none() {
            // A datagram socket is bound (its identifier chosen) by the first
            // send; the kernel already filters by it, this is a second check.
            self.identifier = self.datagram_identifier();
        }
        let deadline = sent_at + timeout;
        let mut ignored = 0usize;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out(sequence, timeout, ignored));
            }
            if !self.wait_readable(deadline - now)? {
                continue;
            }
            // Drain everything queued: the reply may sit behind unrelated packets.
            while let Some((length, source)) = self.receive()? {
                let received_at = Instant::now();
                let framing = match self.kind {
                    SocketKind::Raw => Framing::WithIpHeader,
                    SocketKind::Datagram => Framing::IcmpOnly,
                };
                let packet = &self.receive_buffer[..length];
                let matches = source == self.target
                    && parse_echo_reply(packet, framing).is_ok_and(|reply| {
                        reply.sequence == sequence
                            && self.identifier.is_none_or(|id| reply.identifier == id)
                            && payload_matches(reply.payload, payload_len, sequence, self.salt)
                    });
                if matches {
                    return Ok(received_at.saturating_duration_since(sent_at));
                }
                ignored += 1;
                if ignored >= MAX_IGNORED_PER_PING {
                    return Err(io::Error::other(format!(
                        "gave up waiting for the ICMP echo reply from {} (sequence {sequence}, \
                         {} socket): ignored {ignored} unrelated packets",
                        self.target, self.kind
                    )));
                }
                if Instant::now() >= deadline {
                    return Err(self.timed_out(sequence, timeout, ignored));
                }
            }
        }
    }

    fn timed_out(&self, sequence: u16, timeout: Duration, ignored: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "no ICMP echo reply from {} within {timeout:?} (sequence {sequence}, {} socket, \
                 {ignored} unrelated packets ignored)",
                self.target, self.kind
            ),
        )
    }

    fn send_request(&self) -> io::Result<()> {
        let address = socket_address(self.target);
        loop {
            // SAFETY: the buffer and the address are valid for the lengths
            // given and outlive the call.
            let sent = unsafe {
                libc::sendto(
                    self.socket.as_raw_fd(),
                    self.request.as_ptr().cast(),
                    self.request.len(),
                    0,
                    (&address as *const libc::sockaddr_in).cast(),
                    mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if sent >= 0 {
                if sent as usize != self.request.len() {
                    return Err(io::Error::other(format!(
                        "short send of an ICMP echo request to {}: {sent} of {} bytes",
                        self.target,
                        self.request.len()
                    )));
                }
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(
                    error.kind(),
                    format!(
                        "cannot send an ICMP echo request to {} ({} socket): {error}",
                        self.target, self.kind
                    ),
                ));
            }
        }
    }

    /// The identifier the kernel gave a datagram socket (its local "port").
    fn datagram_identifier(&self) -> Option<u16> {
        // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
        let mut address: libc::sockaddr_in = unsafe { mem::zeroed() };
        let mut length = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: address and length are valid for writing and sized correctly.
        let result = unsafe {
            libc::getsockname(
                self.socket.as_raw_fd(),
                (&mut address as *mut libc::sockaddr_in).cast(),
                &mut length,
            )
        };
        if result != 0 || address.sin_family != libc::AF_INET as libc::sa_family_t {
            return None;
        }
        let identifier = u16::from_be(address.sin_port);
        (identifier != 0).then_some(identifier)
    }

    /// Waits until the socket is readable or `remaining` has passed;
    /// returns whether it is readable (an interrupted wait counts as not).
    fn wait_readable(&self, remaining: Duration) -> io::Result<bool> {
        // POLLERR also counts: the following recv reports the error (for
        // example an ICMP "destination unreachable" on a datagram socket).
        osprobe_core::sys::poll_one(self.socket.as_raw_fd(), libc::POLLIN, remaining).map_err(
            |error| {
                io::Error::new(
                    error.kind(),
                    format!(
                        "cannot wait for the ICMP echo reply from {}: {error}",
                        self.target
                    ),
                )
            },
        )
    }

    /// Receives one packet without blocking: its length and source, or
    /// `None` when nothing is queued.
    fn receive(&mut self) -> io::Result<Option<(usize, Ipv4Addr)>> {
        loop {
            // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
            let mut source: libc::sockaddr_in = unsafe { mem::zeroed() };
            let mut source_length = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // SAFETY: the buffer and the address are valid for writing for
            // the lengths given.
            let received = unsafe {
                libc::recvfrom(
                    self.socket.as_raw_fd(),
                    self.receive_buffer.as_mut_ptr().cast(),
                    self.receive_buffer.len(),
                    libc::MSG_DONTWAIT,
                    (&mut source as *mut libc::sockaddr_in).cast(),
                    &mut source_length,
                )
            };
            if received >= 0 {
                let source_address = if source.sin_family == libc::AF_INET as libc::sa_family_t {
                    Ipv4Addr::from(u32::from_be(source.sin_addr.s_addr))
                } else {
                    Ipv4Addr::UNSPECIFIED
                };
                return Ok(Some((received as usize, source_address)));
            }
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => {
                    return Err(io::Error::new(
                        error.kind(),
                        format!(
                            "error while waiting for the ICMP echo reply from {} ({} socket): \
                             {error}",
                            self.target, self.kind
                        ),
                    ))
                }
            }
        }
    }
}

/// Whether this process may open an unprivileged ICMP datagram socket: its
/// effective gid or one of its supplementary gids lies within
/// `net.ipv4.ping_group_range` (the test the kernel makes in
/// `ping_init_sock`). False when the file cannot be read or parsed.
pub fn unprivileged_allowed() -> bool {
    let Ok(range_text) = fs::read_to_string(PING_GROUP_RANGE_PATH) else {
        return false;
    };
    let Some(range) = parse_ping_group_range(&range_text) else {
        return false;
    };
    process_gids().iter().any(|gid| range.contains(gid))
}

/// Parses "LOW HIGH" (tab-separated in /proc); `None` if malformed. An
/// empty range (LOW > HIGH, the default "1 0") is returned as such.
fn parse_ping_group_range(text: &str) -> Option<std::ops::RangeInclusive<u32>> {
    let mut fields = text.split_whitespace();
    let low = fields.next()?.parse::<u32>().ok()?;
    let high = fields.next()?.parse::<u32>().ok()?;
    if fields.next().is_some() {
        return None;
    }
    Some(low..=high)
}

/// The effective gid and the supplementary gids of this process.
fn process_gids() -> Vec<u32> {
    // SAFETY: getegid cannot fail and takes no arguments.
    let mut gids = vec![unsafe { libc::getegid() }];
    // SAFETY: with size 0, getgroups only returns the count.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if count > 0 {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        // SAFETY: the buffer holds `count` gids.
        let filled = unsafe { libc::getgroups(count, groups.as_mut_ptr()) };
        if filled > 0 {
            groups.truncate(filled as usize);
            gids.extend(groups);
        }
    }
    gids
}

/// Keeps only echo replies on a raw ICMP socket (our own requests on
/// loopback and all other ICMP types are dropped by the kernel).
fn install_echo_reply_filter(socket: &OwnedFd) -> io::Result<()> {
    let drop_mask: u32 = !(1u32 << ICMP_ECHO_REPLY);
    // SAFETY: the option value is a u32 of the size given.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_RAW,
            ICMP_FILTER,
            (&drop_mask as *const u32).cast(),
            mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn socket_address(target: Ipv4Addr) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
    let mut address: libc::sockaddr_in = unsafe { mem::zeroed() };
    address.sin_family = libc::AF_INET as libc::sa_family_t;
    address.sin_addr.s_addr = u32::from(target).to_be();
    address
}

/// The Internet checksum (RFC 1071): the one's complement of the one's
/// complement sum of the 16-bit big-endian words, an odd last byte padded
/// with zero.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut words = bytes.chunks_exact(2);
    for word in &mut words {
        sum += u32::from(u16::from_be_bytes([word[0], word[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    // Fold the carries back in; two folds suffice for any 32-bit sum.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// The payload byte at `index` for a request: a pattern that depends on
/// the Pinger's salt and the sequence number.
fn payload_byte(index: usize, sequence: u16, salt: u32) -> u8 {
    let mixed = salt
        .wrapping_add(u32::from(sequence).wrapping_mul(0x0100_0193))
        .wrapping_add((index as u32).wrapping_mul(0x9e37_79b9));
    (mixed ^ (mixed >> 13) ^ (mixed >> 24)) as u8
}

fn payload_matches(payload: &[u8], expected_len: usize, sequence: u16, salt: u32) -> bool {
    payload.len() == expected_len
        && payload
            .iter()
            .enumerate()
            .all(|(index, byte)| *byte == payload_byte(index, sequence, salt))
}

/// Writes an echo request (type 8, code 0) into `packet`, checksum included.
fn encode_echo_request(
    packet: &mut Vec<u8>,
    identifier: u16,
    sequence: u16,
    payload_len: usize,
    salt: u32,
) {
    packet.clear();
    packet.extend_from_slice(&[ICMP_ECHO_REQUEST, 0, 0, 0]);
    packet.extend_from_slice(&identifier.to_be_bytes());
    packet.extend_from_slice(&sequence.to_be_bytes());
    packet.extend((0..payload_len).map(|index| payload_byte(index, sequence, salt)));
    let checksum = internet_checksum(packet);
    packet[2..4].copy_from_slice(&checksum.to_be_bytes());
}

/// How a received packet starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Raw sockets: the IPv4 header, then the ICMP message.
    WithIpHeader,
    /// Datagram sockets: the ICMP message alone.
    IcmpOnly,
}

/// The fields of a valid echo reply.
#[derive(Debug, PartialEq, Eq)]
struct EchoReply<'a> {
    identifier: u16,
    sequence: u16,
    payload: &'a [u8],
}

/// Why a packet is not a valid echo reply.
#[derive(Debug, PartialEq, Eq)]
enum ReplyError {
    TooShortForIpHeader(usize),
    NotIpv4(u8),
    BadIpHeaderLength {
        header: usize,
        packet: usize,
    },
    BadIpTotalLength {
        total: usize,
        header: usize,
        packet: usize,
    },
    NotIcmp(u8),
    TooShortForIcmpHeader(usize),
    NotEchoReply {
        icmp_type: u8,
        code: u8,
    },
    BadChecksum,
}

/// For [`crate::fuzz`]: parse `packet` in both framings, ignoring the result.
pub(crate) fn fuzz_parse_echo_reply(packet: &[u8]) {
    let _ = parse_echo_reply(packet, Framing::WithIpHeader);
    let _ = parse_echo_reply(packet, Framing::IcmpOnly);
}

/// Parses an echo reply strictly; every length is checked before use.
fn parse_echo_reply(packet: &[u8], framing: Framing) -> Result<EchoReply<'_>, ReplyError> {
    let icmp = match framing {
        Framing::IcmpOnly => packet,
        Framing::WithIpHeader => {
            if packet.len() < IPV4_MIN_HEADER_LEN {
                return Err(ReplyError::TooShortForIpHeader(packet.len()));
            }
            let version = packet[0] >> 4;
            if version != 4 {
                return Err(ReplyError::NotIpv4(version));
            }
            let header = usize::from(packet[0] & 0x0f) * 4;
            if header < IPV4_MIN_HEADER_LEN || header > packet.len() {
                return Err(ReplyError::BadIpHeaderLength {
                    header,
                    packet: packet.len(),
                });
            }
            // The total length bounds the ICMP message: bytes past it (if a
            // driver padded the frame) are not part of the reply.
            let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
            if total < header || total > packet.len() {
                return Err(ReplyError::BadIpTotalLength {
                    total,
                    header,
                    packet: packet.len(),
                });
            }
            let protocol = packet[9];
            if protocol != libc::IPPROTO_ICMP as u8 {
                return Err(ReplyError::NotIcmp(protocol));
            }
            &packet[header..total]
        }
    };
    if icmp.len() < ICMP_HEADER_LEN {
        return Err(ReplyError::TooShortForIcmpHeader(icmp.len()));
    }
    let (icmp_type, code) = (icmp[0], icmp[1]);
    if icmp_type != ICMP_ECHO_REPLY || code != 0 {
        return Err(ReplyError::NotEchoReply { icmp_type, code });
    }
    // Summing a message including its own checksum gives 0 when it is intact.
    if internet_checksum(icmp) != 0 {
        return Err(ReplyError::BadChecksum);
    }
    Ok(EchoReply {
        identifier: u16::from_be_bytes([icmp[4], icmp[5]]),
        sequence: u16::from_be_bytes([icmp[6], icmp[7]]),
        payload: &icmp[ICMP_HEADER_LEN..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::sys::is_root;
    use osprobe_core::testing::skip;
    use proptest::prelude::*;

    const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;
    const TIMEOUT: Duration = Duration::from_secs(2);

    /// Turns an echo request into the reply a host would send.
    fn reply_for(request: &[u8]) -> Vec<u8> {
        let mut reply = request.to_vec();
        reply[0] = ICMP_ECHO_REPLY;
        reply[2..4].copy_from_slice(&[0, 0]);
        let checksum = internet_checksum(&reply);
        reply[2..4].copy_from_slice(&checksum.to_be_bytes());
        reply
    }

    /// Prefixes an ICMP message with a 20-byte IPv4 header (+ options).
    fn with_ip_header(icmp: &[u8], options: &[u8]) -> Vec<u8> {
        let header_len = IPV4_MIN_HEADER_LEN + options.len();
        let total = (header_len + icmp.len()) as u16;
        let mut packet = vec![0x40 | (header_len / 4) as u8, 0];
        packet.extend_from_slice(&total.to_be_bytes());
        packet.extend_from_slice(&[0, 0, 0x40, 0, 64, 1, 0, 0]);
        packet.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
        packet.extend_from_slice(options);
        packet.extend_from_slice(icmp);
        packet
    }

    #[test]
    fn checksum_matches_known_values() {
        // RFC 1071 section 3 example: the sum is 0xddf2, the checksum its complement.
        let rfc_bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(internet_checksum(&rfc_bytes), !0xddf2);
        // An odd length pads with a zero byte.
        assert_eq!(internet_checksum(&[0x01]), 0xfeff);
        assert_eq!(internet_checksum(&[]), 0xffff);
        // A carry that must be folded: 0xffff + 0x0001 = 0x1_0000 -> 0x0001.
        assert_eq!(internet_checksum(&[0xff, 0xff, 0x00, 0x01]), 0xfffe);
    }

    #[test]
    fn known_echo_request_checksums_to_the_right_value() {
        // Type 8, code 0, identifier 0x1234, sequence 1, payload "abcd":
        // 0x0800 + 0x1234 + 0x0001 + 0x6162 + 0x6364 = 0xdefb, complement 0x2104.
        let mut packet = vec![8, 0, 0, 0, 0x12, 0x34, 0x00, 0x01];
        packet.extend_from_slice(b"abcd");
        assert_eq!(internet_checksum(&packet), 0x2104);
        packet[2..4].copy_from_slice(&0x2104u16.to_be_bytes());
        assert_eq!(
            internet_checksum(&packet),
            0,
            "a correct packet sums to zero"
        );
    }

    #[test]
    fn encoded_request_has_header_payload_and_valid_checksum() {
        let mut packet = Vec::new();
        encode_echo_request(&mut packet, 0xbeef, 7, DEFAULT_PAYLOAD_LEN, 42);
        assert_eq!(
            packet.len(),
            32,
            "the CSE 221 report's 32-byte ICMP message"
        );
        assert_eq!(&packet[..2], &[ICMP_ECHO_REQUEST, 0]);
        assert_eq!(&packet[4..8], &[0xbe, 0xef, 0, 7]);
        assert_eq!(internet_checksum(&packet), 0);
        assert!(payload_matches(&packet[8..], DEFAULT_PAYLOAD_LEN, 7, 42));
        assert!(!payload_matches(&packet[8..], DEFAULT_PAYLOAD_LEN, 8, 42));
        assert!(!payload_matches(&packet[8..], DEFAULT_PAYLOAD_LEN, 7, 43));
        encode_echo_request(&mut packet, 1, 1, 0, 0);
        assert_eq!(packet.len(), ICMP_HEADER_LEN);
    }

    #[test]
    fn parses_a_valid_reply_in_both_framings() {
        let mut request = Vec::new();
        encode_echo_request(&mut request, 0x0102, 0x0304, 24, 9);
        let reply = reply_for(&request);
        let parsed = parse_echo_reply(&reply, Framing::IcmpOnly).unwrap();
        assert_eq!((parsed.identifier, parsed.sequence), (0x0102, 0x0304));
        assert_eq!(parsed.payload, &request[8..]);
        // With IP options (IHL 6) and trailing padding past the total length.
        let mut framed = with_ip_header(&reply, &[1, 1, 1, 0]);
        framed.extend_from_slice(&[0xaa; 6]);
        let parsed = parse_echo_reply(&framed, Framing::WithIpHeader).unwrap();
        assert_eq!(parsed.payload, &request[8..]);
    }

    #[test]
    fn rejects_malformed_and_short_replies() {
        let mut request = Vec::new();
        encode_echo_request(&mut request, 5, 6, 24, 1);
        let reply = reply_for(&request);
        let framed = with_ip_header(&reply, &[]);

        assert_eq!(
            parse_echo_reply(&request, Framing::IcmpOnly),
            Err(ReplyError::NotEchoReply {
                icmp_type: 8,
                code: 0
            }),
            "our own request is not a reply"
        );
        assert_eq!(
            parse_echo_reply(&reply[..7], Framing::IcmpOnly),
            Err(ReplyError::TooShortForIcmpHeader(7))
        );
        assert_eq!(
            parse_echo_reply(&[], Framing::IcmpOnly),
            Err(ReplyError::TooShortForIcmpHeader(0))
        );
        assert_eq!(
            parse_echo_reply(&framed[..19], Framing::WithIpHeader),
            Err(ReplyError::TooShortForIpHeader(19))
        );
        let mut corrupted = reply.clone();
        corrupted[10] ^= 0x01;
        assert_eq!(
            parse_echo_reply(&corrupted, Framing::IcmpOnly),
            Err(ReplyError::BadChecksum)
        );
        let mut bad_code = reply.clone();
        bad_code[1] = 1;
        assert!(matches!(
            parse_echo_reply(&bad_code, Framing::IcmpOnly),
            Err(ReplyError::NotEchoReply { code: 1, .. })
        ));

        let mut ipv6 = framed.clone();
        ipv6[0] = 0x65;
        assert_eq!(
            parse_echo_reply(&ipv6, Framing::WithIpHeader),
            Err(ReplyError::NotIpv4(6))
        );
        let mut short_ihl = framed.clone();
        short_ihl[0] = 0x44;
        assert!(matches!(
            parse_echo_reply(&short_ihl, Framing::WithIpHeader),
            Err(ReplyError::BadIpHeaderLength { header: 16, .. })
        ));
        let mut long_ihl = framed[..24].to_vec();
        long_ihl[0] = 0x4f; // 60-byte header in a 24-byte packet
        assert!(matches!(
            parse_echo_reply(&long_ihl, Framing::WithIpHeader),
            Err(ReplyError::BadIpHeaderLength { header: 60, .. })
        ));
        let mut long_total = framed.clone();
        long_total[2..4].copy_from_slice(&1000u16.to_be_bytes());
        assert!(matches!(
            parse_echo_reply(&long_total, Framing::WithIpHeader),
            Err(ReplyError::BadIpTotalLength { total: 1000, .. })
        ));
        let mut short_total = framed.clone();
        short_total[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert!(matches!(
            parse_echo_reply(&short_total, Framing::WithIpHeader),
            Err(ReplyError::BadIpTotalLength { total: 10, .. })
        ));
        let mut udp = framed.clone();
        udp[9] = 17;
        assert_eq!(
            parse_echo_reply(&udp, Framing::WithIpHeader),
            Err(ReplyError::NotIcmp(17))
        );
        // A total length that cuts into the ICMP header.
        let mut cut = framed.clone();
        cut[2..4].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(
            parse_echo_reply(&cut, Framing::WithIpHeader),
            Err(ReplyError::TooShortForIcmpHeader(4))
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_echo_reply(&bytes, Framing::IcmpOnly);
            let _ = parse_echo_reply(&bytes, Framing::WithIpHeader);
            // Also with a plausible first byte, so the deeper checks are reached.
            let mut ipv4 = bytes.clone();
            if let Some(first) = ipv4.first_mut() {
                *first = 0x40 | (*first & 0x0f);
            }
            let _ = parse_echo_reply(&ipv4, Framing::WithIpHeader);
        }

        #[test]
        fn encoded_replies_parse_back(
            identifier in any::<u16>(),
            sequence in any::<u16>(),
            payload_len in 0..=MAX_PAYLOAD_LEN,
            salt in any::<u32>(),
        ) {
            let mut request = Vec::new();
            encode_echo_request(&mut request, identifier, sequence, payload_len, salt);
            let reply = with_ip_header(&reply_for(&request), &[]);
            let parsed = parse_echo_reply(&reply, Framing::WithIpHeader).unwrap();
            prop_assert_eq!(parsed.identifier, identifier);
            prop_assert_eq!(parsed.sequence, sequence);
            prop_assert!(payload_matches(parsed.payload, payload_len, sequence, salt));
        }
    }

    #[test]
    fn ping_group_range_parsing() {
        let default = parse_ping_group_range("1\t0\n").unwrap();
        assert_eq!((*default.start(), *default.end()), (1, 0));
        assert!(default.is_empty(), "the default refuses all");
        assert_eq!(parse_ping_group_range("0 2147483647"), Some(0..=2147483647));
        assert_eq!(parse_ping_group_range(""), None);
        assert_eq!(parse_ping_group_range("5"), None);
        assert_eq!(parse_ping_group_range("a b"), None);
        assert_eq!(parse_ping_group_range("1 2 3"), None);
        assert_eq!(parse_ping_group_range("-1 2"), None);
    }

    #[test]
    fn rejects_bad_targets_and_arguments() {
        for target in [
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            Ipv4Addr::new(224, 0, 0, 1),
        ] {
            let error = Pinger::open(target).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
            assert!(error.to_string().contains(&target.to_string()));
        }
        let Ok(mut pinger) = Pinger::open(LOOPBACK) else {
            skip("the argument checks: no ICMP socket allowed (not root, gid outside ping_group_range)");
            return;
        };
        let error = pinger.ping(MAX_PAYLOAD_LEN + 1, TIMEOUT).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("0..=1472"), "{error}");
        let error = pinger
            .ping(0, MAX_TIMEOUT + Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    /// Pings 127.0.0.1 `count` times; checks every round trip and returns them.
    fn ping_loopback(pinger: &mut Pinger, count: usize) -> Vec<Duration> {
        let mut round_trips = Vec::with_capacity(count);
        for payload_len in [0, 1, 8, MAX_PAYLOAD_LEN] {
            let round_trip = pinger.ping(payload_len, TIMEOUT).unwrap();
            assert!(round_trip > Duration::ZERO && round_trip < TIMEOUT);
        }
        for _ in 0..count {
            let round_trip = pinger.ping(DEFAULT_PAYLOAD_LEN, TIMEOUT).unwrap();
            assert!(round_trip > Duration::ZERO, "round trip {round_trip:?}");
            assert!(round_trip < TIMEOUT, "round trip {round_trip:?}");
            round_trips.push(round_trip);
        }
        round_trips
    }

    fn median(mut round_trips: Vec<Duration>) -> Duration {
        round_trips.sort();
        round_trips[round_trips.len() / 2]
    }

    #[test]
    fn raw_socket_pings_loopback() {
        if !is_root() {
            skip("raw ICMP sockets need root");
            return;
        }
        // The host's loopback: other processes' ICMP traffic may arrive on
        // this raw socket too and must be ignored.
        let mut pinger = Pinger::open_with(LOOPBACK, SocketKind::Raw).unwrap();
        assert_eq!(pinger.kind(), SocketKind::Raw);
        let round_trips = ping_loopback(&mut pinger, 100);
        println!("raw socket, 127.0.0.1: p50 {:?}", median(round_trips));
    }

    #[test]
    fn datagram_socket_opens_exactly_when_unprivileged_allowed() {
        let opened = Pinger::open_with(LOOPBACK, SocketKind::Datagram);
        assert_eq!(opened.is_ok(), unprivileged_allowed(), "{opened:?}");
        if let Err(error) = opened {
            assert!(error.to_string().contains("ping_group_range"), "{error}");
        }
    }

    #[test]
    fn open_prefers_datagram_and_falls_back_to_raw() {
        match Pinger::open(LOOPBACK) {
            Ok(pinger) if unprivileged_allowed() => assert_eq!(pinger.kind(), SocketKind::Datagram),
            Ok(pinger) => assert_eq!(pinger.kind(), SocketKind::Raw),
            Err(error) => {
                assert!(!is_root(), "root can always open a raw socket: {error}");
                skip(format!("neither ICMP socket kind allowed: {error}"));
            }
        }
    }

    #[test]
    fn concurrent_raw_pingers_ignore_each_others_replies() {
        if !is_root() {
            skip("raw ICMP sockets need root");
            return;
        }
        // Each raw socket receives the other's replies too (same sequence
        // numbers, pid-derived identifiers); each must keep only its own.
        // In a namespace of their own: a raw socket also receives every
        // other test's ICMP on the host's loopback, and under a parallel
        // test run that flood can overflow its buffer and drop a reply
        // this test is waiting for.
        let identifiers = in_private_netns(|| {
            // Threads spawned here inherit this thread's namespace.
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    std::thread::spawn(|| {
                        let mut pinger = Pinger::open_with(LOOPBACK, SocketKind::Raw).unwrap();
                        for _ in 0..200 {
                            let round_trip = pinger.ping(DEFAULT_PAYLOAD_LEN, TIMEOUT).unwrap();
                            assert!(round_trip > Duration::ZERO && round_trip < TIMEOUT);
                        }
                        pinger.identifier
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        })
        .unwrap();
        assert_ne!(identifiers[0], identifiers[1]);
    }

    /// Runs `body` on a thread in a fresh, anonymous network namespace whose
    /// loopback is up and whose ping_group_range admits gid 0. The namespace
    /// has no other interface and disappears when the thread ends.
    fn in_private_netns<T: Send + 'static>(
        body: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        std::thread::spawn(move || {
            // SAFETY: unshare takes no pointers; it moves only this thread.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // /proc/sys/net resolves to the namespace of the reading thread.
            fs::write(PING_GROUP_RANGE_PATH, "0 0")?;
            bring_loopback_up()?;
            Ok(body())
        })
        .join()
        .map_err(|_| io::Error::other("the thread in the private network namespace panicked"))?
    }

    fn bring_loopback_up() -> io::Result<()> {
        // SAFETY: socket() takes no pointers.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is fresh and owned only here.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ifreq is plain data; all-zero is a valid value.
        let mut request: libc::ifreq = unsafe { mem::zeroed() };
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
            *slot = *byte as libc::c_char;
        }
        // SAFETY: request is a valid ifreq naming "lo"; the ioctls read and
        // write only its flags.
        unsafe {
            if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) != 0 {
                return Err(io::Error::last_os_error());
            }
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    #[test]
    fn datagram_socket_pings_loopback() {
        if !is_root() {
            if unprivileged_allowed() {
                let mut pinger = Pinger::open_with(LOOPBACK, SocketKind::Datagram).unwrap();
                let round_trips = ping_loopback(&mut pinger, 100);
                println!("datagram socket, 127.0.0.1: p50 {:?}", median(round_trips));
            } else {
                skip("datagram ICMP sockets: not root and gid outside net.ipv4.ping_group_range");
            }
            return;
        }
        // As root, widen ping_group_range in a private namespace rather than
        // changing the host's setting; its 127.0.0.1 is its own loopback.
        let result = in_private_netns(|| {
            assert!(unprivileged_allowed());
            let mut pinger = Pinger::open(LOOPBACK).unwrap();
            assert_eq!(pinger.kind(), SocketKind::Datagram, "open prefers datagram");
            assert!(
                pinger.identifier.is_none(),
                "the kernel chooses it at the first send"
            );
            let round_trips = ping_loopback(&mut pinger, 100);
            assert!(pinger.identifier.is_some(), "learned from getsockname");
            let mut raw = Pinger::open_with(LOOPBACK, SocketKind::Raw).unwrap();
            let raw_round_trips = ping_loopback(&mut raw, 100);
            (median(round_trips), median(raw_round_trips))
        })
        .unwrap();
        println!(
            "private netns, 127.0.0.1: datagram p50 {:?}, raw p50 {:?}",
            result.0, result.1
        );
    }

    #[test]
    fn sequence_numbers_increase_and_stale_replies_are_ignored() {
        let Ok(mut pinger) = Pinger::open(LOOPBACK) else {
            assert!(!is_root());
            skip("no ICMP socket allowed");
            return;
        };
        let first = pinger.next_sequence;
        pinger.ping(DEFAULT_PAYLOAD_LEN, TIMEOUT).unwrap();
        pinger.ping(DEFAULT_PAYLOAD_LEN, TIMEOUT).unwrap();
        assert_eq!(pinger.next_sequence, first.wrapping_add(2));
        // A zero timeout gives up before the reply is read; that reply stays
        // queued and must not be taken for the next ping's.
        match pinger.ping(DEFAULT_PAYLOAD_LEN, Duration::ZERO) {
            Err(error) => {
                assert_eq!(error.kind(), io::ErrorKind::TimedOut);
                assert!(error.to_string().contains("127.0.0.1"), "{error}");
            }
            Ok(round_trip) => panic!("a zero timeout returned a round trip {round_trip:?}"),
        }
        let round_trip = pinger.ping(DEFAULT_PAYLOAD_LEN, TIMEOUT).unwrap();
        assert!(round_trip > Duration::ZERO && round_trip < TIMEOUT);
    }
}
