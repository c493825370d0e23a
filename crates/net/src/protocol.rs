//! The control protocol between an osprobe client and `osprobe serve`.
//!
//! Every TCP connection to the server starts with the server's `Hello`
//! (protocol name, version, a fresh nonce, whether a token is required).
//! The client then sends exactly one of:
//! - `Open` on a *control* connection: authenticate (HMAC of the nonce, see
//!   [`crate::auth`]) and describe a test. The server answers `Opened` with a
//!   session id, or `Error`. Later the client sends `Finish` and the server
//!   answers `Report` with what it measured on each data stream.
//! - `Attach` on a *data* connection: join a session as stream `n`. After
//!   the server's `Attached`, the connection carries the test's raw bytes
//!   (no more frames).
//!
//! - `Describe` on a connection of its own: the server answers `Described`
//!   with its environment (the capture a run stores) and the interface
//!   that carries this connection, then closes (see [`crate::describe`]).
//!
//! A connection that closes before sending anything is fine: that is what
//! `net.connect` does.
//!
//! Framing: a 4-byte big-endian length, then that many bytes of JSON. The
//! length is checked against [`MAX_FRAME`] before anything is allocated, the
//! JSON is parsed strictly (unknown fields and unknown message types are
//! errors), and every number a peer sends is range-checked by
//! [`Message::validate`] before the server acts on it. JSON rather than a
//! hand-rolled binary layout because control messages are few and small
//! (they are never on a timed path), and because a human can read a capture.

use osprobe_core::peer_text;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// The name in `Hello`: a peer that is not osprobe is recognised at once.
/// Bytes every test datagram starts with: session id, sequence, send time
/// (the UDP modes' wire layout; the reports below count payload beyond it).
pub const UDP_HEADER: usize = 32;
pub const PROTOCOL_NAME: &str = "osprobe";
/// Bumped when a change breaks older peers. 2: the Open proof covers the
/// test spec and duration (see [`crate::auth`]).
pub const PROTOCOL_VERSION: u32 = 2;
/// The largest frame body either side accepts: a bound on what a peer
/// can make us allocate, and large enough for the largest message, a
/// `Report` of MAX_STREAMS streams each with its TCP_INFO (about 1.2 KB
/// of JSON each in practice, 2.2 KB with every field at its largest; 16
/// KiB was too small for 16 streams).
pub const MAX_FRAME: usize = 512 * 1024;
/// The largest first message a server reads from a new connection, before
/// the peer has proved anything: an `Open` or `Attach` is a few hundred
/// bytes (a file name of up to 1 KiB included). A peer claiming more is
/// refused before anything is allocated.
pub const MAX_FIRST_FRAME: usize = 4 * 1024;
/// The largest `Described` a client reads: an environment is a few KiB of
/// JSON (caches, mitigations, notes); 64 KiB bounds a hostile server.
pub const MAX_DESCRIBED_FRAME: usize = 64 * 1024;
/// Default TCP port of `osprobe serve` (UDP echo uses the same number).
pub const DEFAULT_PORT: u16 = 5301;

/// Most data streams one session may open.
pub const MAX_STREAMS: u32 = 128;
/// Largest application write/read size a session may ask for.
pub const MAX_IO_SIZE: u32 = 16 * 1024 * 1024;
/// Largest echo message (TCP and UDP).
pub const MAX_ECHO_SIZE: u32 = 65_000;
/// Largest file one stream may send (1 TiB): a sanity bound, the server
/// also checks free space.
pub const MAX_FILE_BYTES: u64 = 1 << 40;

/// One message of the control protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Server, first on every connection.
    Hello {
        protocol: String,
        version: u32,
        /// 32 random bytes, hex: what an authentication proof covers.
        nonce: String,
        /// Whether `Open` and `Attach` must carry a proof.
        auth_required: bool,
        /// The longest session the server allows, in seconds.
        max_duration_s: u32,
        /// The port of the remote file service this server offers beside
        /// the network tests (`serve --export`), on the same address;
        /// absent when it offers none (and then the hello is what older
        /// versions sent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rfs_port: Option<u16>,
    },
    /// Client, on a control connection: start a session.
    Open {
        version: u32,
        /// HMAC proof of the token over this connection's nonce (hex).
        proof: Option<String>,
        /// How long the client expects the test to take, in seconds.
        duration_s: u32,
        test: TestSpec,
    },
    /// Server: the session exists; data connections attach with this id.
    Opened { session: String },
    /// Client, on a data connection: join a session as stream `stream`.
    Attach {
        session: String,
        stream: u32,
        proof: Option<String>,
    },
    /// Server: the data connection is part of the session; raw data follows.
    Attached {},
    /// Client, on the control connection: every stream is done sending.
    /// `hashes[i]` is the sender's hash of stream i's file, for file tests.
    Finish { hashes: Vec<Option<String>> },
    /// Server: what it measured on each stream, in stream order.
    Report { streams: Vec<StreamReport> },
    /// Either side: the request cannot be served; the connection closes.
    Error { code: ErrorCode, message: String },
    /// Client, on a connection of its own: describe your machine and the
    /// interface this connection arrived on. Proved like `Open`.
    Describe { version: u32, proof: Option<String> },
    /// Server: the answer to `Describe`, at most [`MAX_DESCRIBED_FRAME`]
    /// bytes; the connection closes after it.
    Described {
        environment: Box<osprobe_core::Environment>,
        nic: Option<Box<osprobe_core::nic::NicInfo>>,
    },
}

/// What a session measures; the server's role on its data streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TestSpec {
    /// Echo `size`-byte messages on each stream (TCP) and UDP datagrams
    /// that carry the session id.
    Echo { streams: u32, size: u32 },
    /// Read and discard until EOF, in `read_size` reads; report bytes,
    /// timing, CPU and the receiver's TCP_INFO. With `cpu`, the server runs
    /// the receiving threads on that CPU (like iperf3 -A's server half),
    /// when it is allowed there.
    Sink {
        streams: u32,
        read_size: u32,
        #[serde(default)]
        cpu: Option<u32>,
    },
    /// Receive `bytes` per stream into a file on the server's disk, in
    /// `packet`-byte reads. `name` is set by `osprobe send` (kept in the
    /// server's `--dir`); without it the file is a scratch file, deleted
    /// after the report.
    File {
        streams: u32,
        bytes: u64,
        packet: u32,
        name: Option<String>,
        /// Receive with splice (socket -> pipe -> file, one copy) instead
        /// of `packet`-byte reads and writes.
        #[serde(default)]
        zero_copy: bool,
    },
    /// The receiver of `net.ack_stall`: window clamped to one `segment`,
    /// delayed ACKs or TCP_QUICKACK re-armed after every read.
    AckStall { segment: u32, quickack: bool },
    /// The server sends on each stream (iperf3 -R): `write_size`-byte
    /// writes for `duration_ms`, or until the client closes; with `cpu`,
    /// the sending threads run on that CPU. See [`crate::modes`].
    Source {
        streams: u32,
        write_size: u32,
        duration_ms: u32,
        cpu: Option<u32>,
    },
    /// UDP datagrams of `size` bytes to a port of this session alone, which
    /// the server announces on stream 0; it counts loss, jitter and
    /// reordering until stream 0 closes. See [`crate::modes`].
    UdpSink { size: u32 },
    /// Connect/request/response/close transactions (netperf TCP_CRR) on a
    /// listener of this session alone, announced on stream 0: each
    /// connection sends `size` bytes and gets `size` bytes back.
    Crr { size: u32 },
}

impl TestSpec {
    /// How many data streams the session has.
    pub fn streams(&self) -> u32 {
        match self {
            TestSpec::Echo { streams, .. }
            | TestSpec::Sink { streams, .. }
            | TestSpec::File { streams, .. } => *streams,
            TestSpec::Source { streams, .. } => *streams,
            TestSpec::AckStall { .. } | TestSpec::UdpSink { .. } | TestSpec::Crr { .. } => 1,
        }
    }

    /// A short name for logs: `echo`, `sink`, `file`, `ack_stall`.
    pub fn kind(&self) -> &'static str {
        match self {
            TestSpec::Echo { .. } => "echo",
            TestSpec::Sink { .. } => "sink",
            TestSpec::File { .. } => "file",
            TestSpec::AckStall { .. } => "ack_stall",
            TestSpec::Source { .. } => "source",
            TestSpec::UdpSink { .. } => "udp_sink",
            TestSpec::Crr { .. } => "crr",
        }
    }
}

/// What the server measured on one data stream.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamReport {
    pub stream: u32,
    /// Payload bytes received (echoed, for echo streams).
    pub bytes: u64,
    /// First byte received to last byte handled (written to disk, for files),
    /// by the server's clock, in nanoseconds.
    pub elapsed_ns: u64,
    /// CPU time of the server thread that served the stream, nanoseconds.
    pub cpu_ns: u64,
    /// Reads performed.
    pub reads: u64,
    /// Hash of what was received (files).
    pub hash: Option<String>,
    /// Whether a named file was verified and kept (`osprobe send`).
    pub stored: Option<bool>,
    /// The receiver's TCP_INFO at the end, as JSON (see [`crate::tcp_info`]).
    pub tcp_info: Option<serde_json::Value>,
    /// Why the stream failed, if it did.
    pub error: Option<String>,
    /// What a UDP receiver counted (udp_sink sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpCounts>,
}

/// What the receiver of a UDP test counted, in iperf3's terms: datagrams
/// and payload bytes received, those that arrived after a later one
/// (reordered), and the RFC 3550 interarrival jitter.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpCounts {
    pub datagrams: u64,
    pub bytes: u64,
    /// Arrived with a sequence number below the highest seen before.
    pub reordered: u64,
    /// Highest sequence number seen, plus one (0: none).
    pub highest: u64,
    /// RFC 3550 jitter at the end, nanoseconds.
    pub jitter_ns: f64,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed or unexpected message.
    Protocol,
    /// Incompatible protocol version.
    Version,
    /// Missing or wrong proof of the token.
    Auth,
    /// Too many clients or connections, or a limit of the request.
    Busy,
    /// A parameter out of the accepted range.
    Invalid,
    /// Unknown or finished session, or stream already attached.
    Session,
    /// The file cannot be stored (bad name, no --dir, no space).
    Storage,
    /// The session ran past the server's --max-duration.
    Timeout,
    /// Something failed on the server.
    Internal,
}

/// A message that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed by the peer")]
    Closed,
    #[error("connection closed in the middle of a message")]
    Truncated,
    #[error("message of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("empty message")]
    Empty,
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("invalid message: {0}")]
    Invalid(#[from] InvalidMessage),
    #[error("timed out waiting for the peer")]
    TimedOut,
    #[error("{0}")]
    Io(#[source] io::Error),
}

impl FrameError {
    fn from_io(err: io::Error) -> FrameError {
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => FrameError::TimedOut,
            io::ErrorKind::UnexpectedEof => FrameError::Truncated,
            _ => FrameError::Io(err),
        }
    }
}

/// `msg` as one frame: length prefix and JSON body.
pub fn encode(msg: &Message) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len: body.len(),
            limit: MAX_FRAME,
        });
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Parse and validate one frame body (without the length prefix).
pub fn decode_body(body: &[u8]) -> Result<Message, FrameError> {
    if body.is_empty() {
        return Err(FrameError::Empty);
    }
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len: body.len(),
            limit: MAX_FRAME,
        });
    }
    // serde's message quotes what it could not parse (an unknown type or
    // field name): peer text, escaped and capped before anyone logs it.
    let msg: Message = serde_json::from_slice(body).map_err(|e| {
        FrameError::Malformed(peer_text::escape(&e.to_string(), peer_text::MAX_CHARS))
    })?;
    msg.validate().map_err(FrameError::Invalid)?;
    if let Message::Described { environment, nic } = &msg {
        // Environment and NicInfo read leniently from the store (fields
        // only ever added); from a peer, a field this build does not know
        // is refused like any other unknown field.
        crate::peer_check::refuse_unknown_fields(body, environment, nic)
            .map_err(|e| FrameError::Malformed(e.to_string()))?;
    }
    Ok(msg)
}

/// Write `msg` as one frame.
pub fn write_message(w: &mut impl Write, msg: &Message) -> Result<(), FrameError> {
    let frame = encode(msg)?;
    w.write_all(&frame).map_err(FrameError::from_io)?;
    w.flush().map_err(FrameError::from_io)
}

/// Read one frame of at most [`MAX_FRAME`] bytes. EOF before the first
/// byte is [`FrameError::Closed`]; EOF after it is [`FrameError::Truncated`].
/// Timeouts come from the socket's read timeout (or a [`DeadlineReader`]).
pub fn read_message(r: &mut impl Read) -> Result<Message, FrameError> {
    read_message_limited(r, MAX_FRAME)
}

/// Read one frame whose body is at most `limit` bytes. The body buffer
/// grows with the bytes that actually arrive, never with the length the
/// peer claims: a peer that announces a large frame and sends a byte holds
/// a few bytes of memory, not the announced size.
pub fn read_message_limited(r: &mut impl Read, limit: usize) -> Result<Message, FrameError> {
    let mut len_bytes = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len_bytes[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FrameError::from_io(e)),
        }
    }
    let len = u32::from_be_bytes(len_bytes) as usize;
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let limit = limit.min(MAX_FRAME);
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    let mut body = Vec::new();
    r.take(len as u64)
        .read_to_end(&mut body)
        .map_err(FrameError::from_io)?;
    if body.len() < len {
        return Err(FrameError::Truncated);
    }
    decode_body(&body)
}

/// A reader that fails with `TimedOut` once `deadline` has passed, however
/// the bytes trickle in: a socket's read timeout alone restarts with every
/// byte, so a peer sending one byte a second could hold a connection for
/// as long as it likes.
pub struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl<'a> DeadlineReader<'a> {
    pub fn new(stream: &'a TcpStream, deadline: Instant) -> DeadlineReader<'a> {
        DeadlineReader { stream, deadline }
    }
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

/// Hex digits of a nonce (32 bytes) and of a session id (16 bytes).
pub const NONCE_HEX_LEN: usize = 64;
pub const SESSION_HEX_LEN: usize = 32;
/// Hex digits of an HMAC-SHA256 proof and of an xxh3-128 hash.
const PROOF_HEX_LEN: usize = 64;
const HASH_HEX_LEN: usize = 32;
const MAX_TEXT: usize = 1024;

/// Why a message a peer sent is refused though it parsed: a value out of
/// its range (checked so handlers can trust it).
#[derive(Debug, thiserror::Error)]
pub enum InvalidMessage {
    #[error("{what} must be {len} hex digits")]
    NotHex { what: &'static str, len: usize },
    #[error("{what} {value} out of range {min}..={max}")]
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// `protocol` is escaped and capped.
    #[error("not an osprobe peer (protocol '{protocol}')")]
    NotOsprobe { protocol: String },
    #[error("{0} too long")]
    TextTooLong(&'static str),
    #[error("UDP jitter must be a finite number >= 0")]
    BadJitter,
    #[error("{0}")]
    PeerValue(#[from] crate::peer_check::PeerValueError),
}

fn check_hex(what: &'static str, s: &str, len: usize) -> Result<(), InvalidMessage> {
    if s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(InvalidMessage::NotHex { what, len })
    }
}

fn check_range(what: &'static str, value: u64, min: u64, max: u64) -> Result<(), InvalidMessage> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(InvalidMessage::OutOfRange {
            what,
            value,
            min,
            max,
        })
    }
}

fn check_proof(proof: &Option<String>) -> Result<(), InvalidMessage> {
    match proof {
        Some(p) => check_hex("proof", p, PROOF_HEX_LEN),
        None => Ok(()),
    }
}

fn check_text_len(what: &'static str, text: Option<&str>) -> Result<(), InvalidMessage> {
    if text.is_some_and(|t| t.len() > MAX_TEXT) {
        return Err(InvalidMessage::TextTooLong(what));
    }
    Ok(())
}

impl Message {
    /// Range checks on everything a peer may send, so handlers can trust
    /// the values (no huge allocations, no zero divisors).
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        match self {
            Message::Hello {
                protocol,
                nonce,
                rfs_port,
                ..
            } => validate_hello(protocol, nonce, *rfs_port),
            Message::Open {
                proof,
                duration_s,
                test,
                ..
            } => {
                check_proof(proof)?;
                check_range("duration_s", *duration_s as u64, 1, 24 * 3600)?;
                test.validate()
            }
            Message::Opened { session } => check_hex("session", session, SESSION_HEX_LEN),
            Message::Attach {
                session,
                stream,
                proof,
            } => {
                check_hex("session", session, SESSION_HEX_LEN)?;
                check_range("stream", *stream as u64, 0, MAX_STREAMS as u64 - 1)?;
                check_proof(proof)
            }
            Message::Attached {} => Ok(()),
            Message::Finish { hashes } => {
                check_range("hashes", hashes.len() as u64, 0, MAX_STREAMS as u64)?;
                for h in hashes.iter().flatten() {
                    check_hex("hash", h, HASH_HEX_LEN)?;
                }
                Ok(())
            }
            Message::Report { streams } => validate_report(streams),
            Message::Error { message, .. } => check_text_len("error text", Some(message)),
            Message::Describe { proof, .. } => check_proof(proof),
            Message::Described { environment, nic } => {
                crate::peer_check::check_peer_value(
                    "environment",
                    &serde_json::to_value(environment).unwrap_or_default(),
                )?;
                Ok(crate::peer_check::check_peer_value(
                    "nic",
                    &serde_json::to_value(nic).unwrap_or_default(),
                )?)
            }
        }
    }

    /// The message's type, for "expected X, got Y" errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Open { .. } => "open",
            Message::Opened { .. } => "opened",
            Message::Attach { .. } => "attach",
            Message::Attached {} => "attached",
            Message::Finish { .. } => "finish",
            Message::Report { .. } => "report",
            Message::Error { .. } => "error",
            Message::Describe { .. } => "describe",
            Message::Described { .. } => "described",
        }
    }
}

fn validate_hello(
    protocol: &str,
    nonce: &str,
    rfs_port: Option<u16>,
) -> Result<(), InvalidMessage> {
    if rfs_port == Some(0) {
        return Err(InvalidMessage::OutOfRange {
            what: "rfs_port",
            value: 0,
            min: 1,
            max: 65535,
        });
    }
    if protocol != PROTOCOL_NAME {
        return Err(InvalidMessage::NotOsprobe {
            protocol: peer_text::escape(protocol, 64),
        });
    }
    check_hex("nonce", nonce, NONCE_HEX_LEN)
}

fn validate_report(streams: &[StreamReport]) -> Result<(), InvalidMessage> {
    check_range("streams", streams.len() as u64, 0, MAX_STREAMS as u64)?;
    for s in streams {
        if let Some(h) = &s.hash {
            check_hex("hash", h, HASH_HEX_LEN)?;
        }
        check_text_len("stream error text", s.error.as_deref())?;
        if s.udp
            .is_some_and(|u| !u.jitter_ns.is_finite() || u.jitter_ns < 0.0)
        {
            return Err(InvalidMessage::BadJitter);
        }
    }
    Ok(())
}

impl TestSpec {
    /// Range checks of a test request.
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        match self {
            TestSpec::Echo { streams, size } => {
                check_range("streams", *streams as u64, 1, MAX_STREAMS as u64)?;
                check_range("size", *size as u64, 1, MAX_ECHO_SIZE as u64)
            }
            TestSpec::Sink {
                streams, read_size, ..
            } => {
                check_range("streams", *streams as u64, 1, MAX_STREAMS as u64)?;
                check_range("read_size", *read_size as u64, 1, MAX_IO_SIZE as u64)
            }
            TestSpec::File {
                streams,
                bytes,
                packet,
                name,
                ..
            } => {
                check_range("streams", *streams as u64, 1, MAX_STREAMS as u64)?;
                check_range("bytes", *bytes, 0, MAX_FILE_BYTES)?;
                check_range("packet", *packet as u64, 1, MAX_IO_SIZE as u64)?;
                check_text_len("file name", name.as_deref())
            }
            TestSpec::AckStall { segment, .. } => {
                check_range("segment", *segment as u64, 1, MAX_ECHO_SIZE as u64)
            }
            TestSpec::Source {
                streams,
                write_size,
                duration_ms,
                ..
            } => {
                check_range("streams", *streams as u64, 1, MAX_STREAMS as u64)?;
                check_range("write_size", *write_size as u64, 1, MAX_IO_SIZE as u64)?;
                check_range("duration_ms", *duration_ms as u64, 1, 24 * 3600 * 1000)
            }
            TestSpec::UdpSink { size } => check_range(
                "size",
                *size as u64,
                UDP_HEADER as u64,
                MAX_ECHO_SIZE as u64,
            ),
            TestSpec::Crr { size } => check_range("size", *size as u64, 1, MAX_ECHO_SIZE as u64),
        }
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Bytes of a hex string, or None if it is not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub use osprobe_core::random::os_random_bytes as random_bytes;

#[cfg(test)]
mod tests {

    #[test]
    fn a_report_of_every_stream_with_its_tcp_info_fits_in_a_frame() {
        // Every field at a many-digit value: the largest TCP_INFO JSON.
        let info = crate::tcp_info::TcpInfo::default();
        let mut json = serde_json::to_value(&info).unwrap();
        for v in json.as_object_mut().unwrap().values_mut() {
            if v.is_number() || v.is_null() {
                *v = serde_json::json!(u64::MAX);
            }
        }
        let stream = |i: u32| StreamReport {
            stream: i,
            bytes: u64::MAX,
            elapsed_ns: u64::MAX,
            cpu_ns: u64::MAX,
            reads: u64::MAX,
            hash: Some("f".repeat(32)),
            stored: Some(true),
            tcp_info: Some(json.clone()),
            error: None,
            udp: Some(UdpCounts {
                datagrams: u64::MAX,
                bytes: u64::MAX,
                reordered: u64::MAX,
                highest: u64::MAX,
                jitter_ns: f64::MAX,
            }),
        };
        let report = Message::Report {
            streams: (0..MAX_STREAMS).map(stream).collect(),
        };
        let frame = encode(&report).expect("the largest report fits");
        assert!(frame.len() <= MAX_FRAME + 4, "{} bytes", frame.len());
    }
    use super::*;
    use proptest::prelude::*;

    fn hex_string(len: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<u8>(), len / 2).prop_map(|b| hex(&b))
    }

    fn test_spec() -> impl Strategy<Value = TestSpec> {
        prop_oneof![
            (1..=MAX_STREAMS, 1..=MAX_ECHO_SIZE)
                .prop_map(|(streams, size)| TestSpec::Echo { streams, size }),
            (1..=MAX_STREAMS, 1..=MAX_IO_SIZE).prop_map(|(streams, read_size)| TestSpec::Sink {
                streams,
                read_size,
                cpu: None
            }),
            (
                1..=MAX_STREAMS,
                0..=MAX_FILE_BYTES,
                1..=MAX_IO_SIZE,
                proptest::option::of("[a-zA-Z0-9 ._-]{0,40}")
            )
                .prop_map(|(streams, bytes, packet, name)| TestSpec::File {
                    streams,
                    bytes,
                    packet,
                    name,
                    zero_copy: false
                }),
            (1..=MAX_ECHO_SIZE, any::<bool>())
                .prop_map(|(segment, quickack)| TestSpec::AckStall { segment, quickack }),
            (
                1..=MAX_STREAMS,
                1..=MAX_IO_SIZE,
                1u32..=86_400_000,
                proptest::option::of(0u32..64)
            )
                .prop_map(|(streams, write_size, duration_ms, cpu)| TestSpec::Source {
                    streams,
                    write_size,
                    duration_ms,
                    cpu
                }),
            (crate::modes::UDP_HEADER as u32..=MAX_ECHO_SIZE)
                .prop_map(|size| TestSpec::UdpSink { size }),
            (1..=MAX_ECHO_SIZE).prop_map(|size| TestSpec::Crr { size }),
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        prop_oneof![
            (
                hex_string(NONCE_HEX_LEN),
                any::<bool>(),
                any::<u32>(),
                proptest::option::of(1u16..)
            )
                .prop_map(|(nonce, auth_required, max_duration_s, rfs_port)| {
                    Message::Hello {
                        protocol: PROTOCOL_NAME.into(),
                        version: PROTOCOL_VERSION,
                        nonce,
                        auth_required,
                        max_duration_s,
                        rfs_port,
                    }
                }),
            (
                any::<u32>(),
                proptest::option::of(hex_string(PROOF_HEX_LEN)),
                1u32..=86_400,
                test_spec()
            )
                .prop_map(|(version, proof, duration_s, test)| Message::Open {
                    version,
                    proof,
                    duration_s,
                    test
                }),
            hex_string(SESSION_HEX_LEN).prop_map(|session| Message::Opened { session }),
            (
                hex_string(SESSION_HEX_LEN),
                0..MAX_STREAMS,
                proptest::option::of(hex_string(PROOF_HEX_LEN))
            )
                .prop_map(|(session, stream, proof)| Message::Attach {
                    session,
                    stream,
                    proof
                }),
            Just(Message::Attached {}),
            proptest::collection::vec(proptest::option::of(hex_string(HASH_HEX_LEN)), 0..8)
                .prop_map(|hashes| Message::Finish { hashes }),
            proptest::collection::vec(
                (
                    any::<u32>(),
                    any::<u64>(),
                    any::<u64>(),
                    proptest::option::of(".{0,50}")
                ),
                0..8
            )
            .prop_map(|v| Message::Report {
                streams: v
                    .into_iter()
                    .map(|(stream, bytes, elapsed_ns, error)| StreamReport {
                        stream,
                        bytes,
                        elapsed_ns,
                        error,
                        ..StreamReport::default()
                    })
                    .collect()
            }),
            ".{0,200}".prop_map(|message| Message::Error {
                code: ErrorCode::Busy,
                message
            }),
            (
                any::<u32>(),
                proptest::option::of(hex_string(PROOF_HEX_LEN))
            )
                .prop_map(|(version, proof)| Message::Describe { version, proof }),
        ]
    }

    proptest! {
        #[test]
        fn every_valid_message_round_trips(msg in message()) {
            let frame = encode(&msg).unwrap();
            let back = read_message(&mut frame.as_slice()).unwrap();
            prop_assert_eq!(back, msg);
        }

        #[test]
        fn every_truncation_is_an_error(msg in message(), cut in any::<prop::sample::Index>()) {
            let frame = encode(&msg).unwrap();
            let cut = cut.index(frame.len());
            let got = read_message(&mut &frame[..cut]);
            if cut == 0 {
                prop_assert!(matches!(got, Err(FrameError::Closed)));
            } else {
                prop_assert!(matches!(got, Err(FrameError::Truncated)));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = read_message(&mut bytes.as_slice());
            let _ = decode_body(&bytes);
        }

        #[test]
        fn arbitrary_json_objects_never_panic(text in r#"\{"type":"[a-z_]{1,10}"(,"[a-z_]{1,10}":(-?[0-9]{1,25}|"[0-9a-f]{0,70}"|null|\[\]|\{\}))*\}"#) {
            let _ = decode_body(text.as_bytes());
        }
    }

    #[test]
    fn oversized_length_is_refused_before_reading_the_body() {
        let mut frame = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        assert!(matches!(
            read_message(&mut frame.as_slice()),
            Err(FrameError::TooLarge { len, .. }) if len == MAX_FRAME + 1
        ));
        let huge = u32::MAX.to_be_bytes();
        assert!(matches!(
            read_message(&mut huge.as_slice()),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_first_frame_over_its_limit_is_refused() {
        let open = Message::Open {
            version: PROTOCOL_VERSION,
            proof: None,
            duration_s: 5,
            test: TestSpec::Echo {
                streams: 1,
                size: 1,
            },
        };
        let frame = encode(&open).unwrap();
        assert!(read_message_limited(&mut frame.as_slice(), MAX_FIRST_FRAME).is_ok());
        let claim = ((MAX_FIRST_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_message_limited(&mut claim.as_slice(), MAX_FIRST_FRAME),
            Err(FrameError::TooLarge { limit, .. }) if limit == MAX_FIRST_FRAME
        ));
        // A body shorter than its claim is a truncation, not a hang or a panic.
        let mut short = 100u32.to_be_bytes().to_vec();
        short.extend_from_slice(b"{\"type\"");
        assert!(matches!(
            read_message_limited(&mut short.as_slice(), MAX_FIRST_FRAME),
            Err(FrameError::Truncated)
        ));
    }

    #[test]
    fn zero_length_is_refused() {
        assert!(matches!(
            read_message(&mut [0u8, 0, 0, 0].as_slice()),
            Err(FrameError::Empty)
        ));
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        for body in [
            r#"{"type":"attached","extra":1}"#,
            r#"{"type":"launch_missiles"}"#,
            r#"{"type":"opened"}"#,
            r#"{"type":"open","version":1,"proof":null,"duration_s":5,"test":{"kind":"sink","streams":1,"read_size":1,"x":2}}"#,
            r#"not json"#,
            r#"[]"#,
        ] {
            assert!(
                matches!(decode_body(body.as_bytes()), Err(FrameError::Malformed(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let open = |test: TestSpec, duration_s: u32| Message::Open {
            version: 1,
            proof: None,
            duration_s,
            test,
        };
        let bad = [
            open(
                TestSpec::Sink {
                    streams: 0,
                    read_size: 1,
                    cpu: None,
                },
                5,
            ),
            open(
                TestSpec::Sink {
                    streams: MAX_STREAMS + 1,
                    read_size: 1,
                    cpu: None,
                },
                5,
            ),
            open(
                TestSpec::Sink {
                    streams: 1,
                    read_size: 0,
                    cpu: None,
                },
                5,
            ),
            open(
                TestSpec::Sink {
                    streams: 1,
                    read_size: MAX_IO_SIZE + 1,
                    cpu: None,
                },
                5,
            ),
            open(
                TestSpec::Echo {
                    streams: 1,
                    size: MAX_ECHO_SIZE + 1,
                },
                5,
            ),
            open(
                TestSpec::AckStall {
                    segment: 0,
                    quickack: true,
                },
                5,
            ),
            open(
                TestSpec::Source {
                    streams: 1,
                    write_size: 0,
                    duration_ms: 1000,
                    cpu: None,
                },
                5,
            ),
            open(
                TestSpec::Source {
                    streams: 1,
                    write_size: 1,
                    duration_ms: 0,
                    cpu: None,
                },
                5,
            ),
            open(TestSpec::UdpSink { size: 8 }, 5),
            open(TestSpec::Crr { size: 0 }, 5),
            open(
                TestSpec::Sink {
                    streams: 1,
                    read_size: 1,
                    cpu: None,
                },
                0,
            ),
            Message::Attach {
                session: "zz".repeat(16),
                stream: 0,
                proof: None,
            },
            Message::Attach {
                session: "00".repeat(16),
                stream: MAX_STREAMS,
                proof: None,
            },
            Message::Finish {
                hashes: vec![Some("abc".into())],
            },
        ];
        for msg in bad {
            let body = serde_json::to_vec(&msg).unwrap();
            assert!(
                matches!(decode_body(&body), Err(FrameError::Invalid(_))),
                "{msg:?}"
            );
        }
    }

    #[test]
    fn a_hello_from_another_protocol_is_refused() {
        let msg = Message::Hello {
            protocol: "iperf3".into(),
            version: 1,
            nonce: "00".repeat(32),
            auth_required: false,
            max_duration_s: 10,
            rfs_port: None,
        };
        let body = serde_json::to_vec(&msg).unwrap();
        assert!(matches!(decode_body(&body), Err(FrameError::Invalid(_))));
    }

    #[test]
    fn a_hello_without_a_file_service_is_what_older_versions_sent() {
        let msg = Message::Hello {
            protocol: PROTOCOL_NAME.into(),
            version: PROTOCOL_VERSION,
            nonce: "00".repeat(32),
            auth_required: false,
            max_duration_s: 10,
            rfs_port: None,
        };
        let text = String::from_utf8(serde_json::to_vec(&msg).unwrap()).unwrap();
        assert!(!text.contains("rfs_port"), "{text}");
        let with_port = |port| Message::Hello {
            protocol: PROTOCOL_NAME.into(),
            version: PROTOCOL_VERSION,
            nonce: "00".repeat(32),
            auth_required: false,
            max_duration_s: 10,
            rfs_port: port,
        };
        let offered = with_port(Some(5302));
        let body = serde_json::to_vec(&offered).unwrap();
        assert_eq!(decode_body(&body).unwrap(), offered);
        let zero = with_port(Some(0));
        let body = serde_json::to_vec(&zero).unwrap();
        assert!(matches!(decode_body(&body), Err(FrameError::Invalid(_))));
    }

    #[test]
    fn hex_round_trips() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&bytes), "0001abff");
        assert_eq!(unhex("0001abff").unwrap(), bytes);
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("é1"), None);
    }
}
