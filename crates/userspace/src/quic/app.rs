//! The two applications on the QUIC connection: the client sends
//! `duration` worth of pseudo-random bytes on one unidirectional stream and
//! hashes what the stream accepted; the server reads the stream in order,
//! hashes it and counts the bytes per interval.

use super::error::EndpointError;
use super::reorder::Reassembler;
use osprobe_core::random::SplitMix64;
use quinn_proto::{Connection, Dir, StreamEvent, StreamId, VarInt, WriteError};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// The payload repeats a block of this size (large enough that no stream
/// pattern lines up with packet sizes).
const BLOCK: usize = 1 << 20;
/// The least the send buffer holds (written, unacknowledged bytes).
const MIN_SEND_WINDOW: u64 = 256 * 1024;
/// The seed of the payload.
const PAYLOAD_SEED: u64 = 0x05f1_0c0d_e15e_ed01;

/// What the connection's event loop asks of an application.
pub trait App {
    /// One event the connection emitted for the application.
    fn on_stream_event(
        &mut self,
        conn: &mut Connection,
        event: StreamEvent,
    ) -> Result<(), EndpointError>;
    /// The connection is established.
    fn on_connected(&mut self, conn: &mut Connection) -> Result<(), EndpointError>;
    /// Write or read as much as the connection takes now.
    fn pump(&mut self, conn: &mut Connection) -> Result<(), EndpointError>;
    /// The application's part is over (the sender's data acknowledged, the
    /// receiver's stream read to its end).
    fn done(&self) -> bool;
    /// Where the application stands, for an error message.
    fn progress(&self) -> String;
}

/// The client's side.
pub struct Sender {
    block: Vec<u8>,
    position: usize,
    duration: Duration,
    stream: Option<StreamId>,
    hasher: Xxh3,
    pub written: u64,
    pub started: Option<Instant>,
    finishing: bool,
    /// When the peer acknowledged the whole stream.
    pub acknowledged: Option<Instant>,
}

impl Sender {
    pub fn new(duration: Duration) -> Sender {
        let mut block = vec![0u8; BLOCK];
        SplitMix64::new(PAYLOAD_SEED).fill(&mut block);
        Sender {
            block,
            position: 0,
            duration,
            stream: None,
            hasher: Xxh3::new(),
            written: 0,
            started: None,
            finishing: false,
            acknowledged: None,
        }
    }

    pub fn hash(&self) -> u128 {
        self.hasher.digest128()
    }
}

impl App for Sender {
    fn on_connected(&mut self, conn: &mut Connection) -> Result<(), EndpointError> {
        let id = conn
            .streams()
            .open(Dir::Uni)
            .ok_or(EndpointError::NoStream)?;
        self.stream = Some(id);
        self.started = Some(Instant::now());
        Ok(())
    }

    fn on_stream_event(
        &mut self,
        _conn: &mut Connection,
        event: StreamEvent,
    ) -> Result<(), EndpointError> {
        match event {
            StreamEvent::Finished { id } if Some(id) == self.stream => {
                self.acknowledged = Some(Instant::now());
            }
            StreamEvent::Stopped { error_code, .. } => {
                return Err(EndpointError::StreamStopped(error_code))
            }
            _ => {}
        }
        Ok(())
    }

    fn pump(&mut self, conn: &mut Connection) -> Result<(), EndpointError> {
        let (Some(id), Some(started)) = (self.stream, self.started) else {
            return Ok(());
        };
        if self.finishing {
            return Ok(());
        }
        if started.elapsed() >= self.duration {
            self.finishing = true;
            return conn
                .send_stream(id)
                .finish()
                .map_err(EndpointError::quic("finishing the stream"));
        }
        // The send buffer follows the congestion window, as Linux's send
        // buffer autotuning does: the data written and not yet acknowledged
        // stays near what the controller lets fly, so that at `duration`
        // little is left to drain (a fixed large buffer would take most of
        // the transfer to drain on a lossy path).
        let cwnd = conn.stats().path.cwnd;
        conn.set_send_window(cwnd.saturating_mul(2).max(MIN_SEND_WINDOW));
        let mut stream = conn.send_stream(id);
        loop {
            let chunk = &self.block[self.position..];
            match stream.write(chunk) {
                Ok(0) | Err(WriteError::Blocked) => return Ok(()),
                Ok(n) => {
                    self.hasher.update(&chunk[..n]);
                    self.written += n as u64;
                    self.position = (self.position + n) % self.block.len();
                }
                Err(e) => return Err(EndpointError::quic("writing the stream")(e)),
            }
        }
    }

    fn done(&self) -> bool {
        self.acknowledged.is_some()
    }

    fn progress(&self) -> String {
        format!(
            "the client wrote {} bytes, {}",
            self.written,
            match (self.finishing, self.acknowledged) {
                (_, Some(_)) => "all acknowledged",
                (true, None) => "finished the stream, not all acknowledged",
                (false, None) => "still sending",
            }
        )
    }
}

/// The server's side.
pub struct Receiver {
    interval: Duration,
    stream: Option<StreamId>,
    hasher: Xxh3,
    pub received: u64,
    pub first_byte: Option<Instant>,
    pub last_byte: Option<Instant>,
    /// Bytes read per interval since the first byte.
    pub per_interval: Vec<u64>,
    finished: bool,
    reorder: Reassembler,
}

impl Receiver {
    pub fn new(interval: Duration) -> Receiver {
        Receiver {
            interval,
            stream: None,
            hasher: Xxh3::new(),
            received: 0,
            first_byte: None,
            last_byte: None,
            per_interval: Vec::new(),
            finished: false,
            reorder: Reassembler::new(),
        }
    }

    pub fn hash(&self) -> u128 {
        self.hasher.digest128()
    }

    fn count(&mut self, bytes: usize) {
        let now = Instant::now();
        let first = *self.first_byte.get_or_insert(now);
        self.last_byte = Some(now);
        let slot = (now.duration_since(first).as_nanos() / self.interval.as_nanos()) as usize;
        if self.per_interval.len() <= slot {
            self.per_interval.resize(slot + 1, 0);
        }
        self.per_interval[slot] += bytes as u64;
    }
}

impl App for Receiver {
    fn on_connected(&mut self, _conn: &mut Connection) -> Result<(), EndpointError> {
        Ok(())
    }

    fn on_stream_event(
        &mut self,
        conn: &mut Connection,
        event: StreamEvent,
    ) -> Result<(), EndpointError> {
        if let StreamEvent::Opened { dir: Dir::Uni } = event {
            if self.stream.is_none() {
                self.stream = conn.streams().accept(Dir::Uni);
            }
        }
        Ok(())
    }

    fn pump(&mut self, conn: &mut Connection) -> Result<(), EndpointError> {
        let Some(id) = self.stream else {
            return Ok(());
        };
        if self.finished {
            return Ok(());
        }
        let mut stream = conn.recv_stream(id);
        // Unordered: see `reorder` for why quinn-proto's ordered read is
        // not used.
        let mut chunks = stream
            .read(false)
            .map_err(EndpointError::quic("reading the stream"))?;
        let mut outcome = Ok(());
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    let mut in_order = 0usize;
                    let hasher = &mut self.hasher;
                    let inserted = self.reorder.insert(chunk.offset, chunk.bytes, |b| {
                        hasher.update(b);
                        in_order += b.len();
                    });
                    if in_order > 0 {
                        self.received += in_order as u64;
                        self.count(in_order);
                    }
                    if let Err(e) = inserted {
                        outcome = Err(e.into());
                        break;
                    }
                }
                Ok(None) => {
                    // Every byte up to the stream's end has arrived.
                    if self.reorder.held() > 0 {
                        outcome = Err(EndpointError::OutOfOrderAtEnd(self.reorder.held()));
                    }
                    self.finished = true;
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(e) => {
                    outcome = Err(EndpointError::quic("reading the stream")(e));
                    break;
                }
            }
        }
        // Frees flow-control credit (the peer learns it with the next
        // packet); the return value only says whether to transmit soon,
        // which the driver does every round anyway.
        let _ = chunks.finalize();
        outcome
    }

    fn done(&self) -> bool {
        self.finished
    }

    fn progress(&self) -> String {
        format!(
            "the server read {} bytes in order, {} more held beyond a hole{}",
            self.reorder.delivered(),
            self.reorder.held(),
            if self.finished {
                ", the whole stream"
            } else {
                ""
            }
        )
    }
}

/// The application error code of a clean close.
pub const CLOSE_DONE: VarInt = VarInt::from_u32(0);
