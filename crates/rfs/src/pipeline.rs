//! The client's request pipeline: up to `window` requests in flight, each
//! matched to its reply by request id, retransmitted over UDP with
//! exponential backoff.
//!
//! A job produces requests one at a time (`Job::next`) and consumes
//! replies (`Job::reply`) in whatever order they arrive; the pipeline
//! keeps the window full, which is what SOS did with MAX_IN_FLIGHT NFS
//! packets: with one request in flight every request costs a round trip,
//! with `w` in flight the round trip is shared by `w` packets until the
//! link, the server or a socket buffer becomes the limit.
//!
//! Retransmission (UDP only; TCP is reliable and a silent TCP server is
//! simply an error after `timeout`):
//!
//! - Each request gets a retransmission timeout (RTO) from a smoothed
//!   round-trip estimate (Jacobson/Karels: srtt + 4 x rttvar, clamped to
//!   [min_rto, max_rto]). Only replies to requests sent once are sampled
//!   (Karn: a reply to a retransmitted request could answer either copy).
//! - An expired request is sent again with its RTO doubled (capped at
//!   max_rto), and the estimate is backed off too, so new requests do not
//!   keep timing out if the path got slower. After `max_tries` sends the
//!   job fails with [`ClientError::TimedOut`], naming the operation.
//! - Slow operations (hash, commit) are sent "patient": a longer first
//!   RTO and a higher cap, so a server hashing a large file is not flooded
//!   with duplicates (which its duplicate cache would drop anyway).
//! - A late reply to a request already answered (the original and a
//!   retransmission both got through) is counted and ignored.
//!
//! Traps:
//!
//! - The duplicate-request cache on the server covers a bounded number of
//!   recent request ids (`drc_span`, from `Welcome`). The pipeline never
//!   lets the newest id run more than `horizon` (half the span) ahead of
//!   the oldest unanswered one, so every retransmission it can make is
//!   still covered: a request whose reply keeps getting lost stalls new
//!   requests rather than risking being executed twice.
//! - Socket buffers: `window x packet` bytes of replies can arrive at once.
//!   If the receive buffer is smaller, the kernel drops datagrams and the
//!   window "works" only through retransmissions: throughput falls off a
//!   cliff at some window size (a candidate for SOS's zig-zag). The client
//!   asks for a buffer of twice that size.
//! - Request ids are never reused within a session, so a stray reply can
//!   never be taken for the answer to a newer request.
//!
//! TCP costs (what the loopback benchmark against a plain stream showed):
//! per 32 KiB read the kernel's TCP path, not the copies, dominates, so
//! the pipeline saves system calls and segments. Replies are read in
//! large chunks into a frame buffer and parsed in place (not one read for
//! the length and one for the body); requests made while replies are
//! still buffered are queued and written together just before the client
//! would block, one segment for several requests instead of one each
//! (TCP_NODELAY stays on, so a lone request still leaves at once).
//!
//! UDP costs: a datagram per request and per reply, so the pipeline saves
//! system calls and wake-ups by batches. The requests issued while the
//! replies of a batch were acted on go with one sendmmsg just before the
//! client waits (the server's worker then finds them queued together);
//! the replies queued go into their places with one recvmmsg
//! ([`crate::udp_place`]). The receive timeout is set only when the next
//! retransmission is due sooner than the one set (a system call per reply
//! before).

use crate::error::ClientError;
use crate::inplace::{Expected, Placed, Placer};
use crate::protocol::framing::FrameBuffer;
use crate::protocol::{
    decode_header, decode_reply, encode_request, DecodeError, Op, RemoteError, Reply, Request,
    MAX_MESSAGE,
};
use crate::udp_io;
use crate::udp_place::{self, Receiver};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// First RTO of a patient request.
const PATIENT_RTO: Duration = Duration::from_secs(1);
/// RTO cap of a patient request.
const PATIENT_MAX_RTO: Duration = Duration::from_secs(8);

/// Sends of a hello whose port answers "unreachable" before giving up.
const REFUSED_HELLO_TRIES: u32 = 3;

/// TCP: the reply buffer. A window of 32 replies of 32 KiB is 1 MiB: with
/// room for all of it one read takes whatever arrived (measured on
/// `rfs get` of 32 MiB: 262 reads with the two-frame buffer of a server
/// connection, see docs/pager.md).
const CLIENT_RX: usize = 1 << 20;

/// TCP: read replies received in place by one read at most.
const MAX_PLACED: usize = 64;

/// TCP: queued requests are written once they reach this many bytes, even
/// if replies are still buffered (bounds the queue with large writes).
const TX_FLUSH: usize = 256 << 10;

/// Retransmission and timeout settings.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// RTO before any round trip was measured.
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Sends of one request (the first one included) before giving up.
    pub max_tries: u32,
    /// TCP: how long to wait for a reply.
    pub timeout: Duration,
}

/// Counters of a client.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientStats {
    /// Requests sent (each once; retransmissions are counted apart).
    pub requests: u64,
    pub retransmissions: u64,
    /// Replies to requests already answered.
    pub late_replies: u64,
    /// Datagrams that were not a reply to this session.
    pub stray: u64,
    /// Smoothed round trip, once measured.
    pub srtt: Option<Duration>,
    /// The current retransmission timeout.
    pub rto: Duration,
}

/// The socket under a pipeline.
pub(crate) enum Conn {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// Where a [`Job`] writes its next request.
pub(crate) struct Encoder<'a> {
    buf: &'a mut Vec<u8>,
    session: u64,
    xid: u64,
    framed: bool,
    op: Option<Op>,
    patient: bool,
}

impl Encoder<'_> {
    /// Encode `req` as the next request.
    pub fn request(&mut self, req: &Request<'_>) -> Result<(), ClientError> {
        self.buf.clear();
        if self.framed {
            self.buf.extend_from_slice(&[0u8; 4]);
        }
        encode_request(self.session, self.xid, req, self.buf)?;
        if self.framed {
            let len = (self.buf.len() - 4) as u32;
            self.buf[..4].copy_from_slice(&len.to_be_bytes());
        }
        self.op = Some(req.op());
        Ok(())
    }

    /// Give this request a long timeout (slow operations).
    pub fn patient(&mut self) {
        self.patient = true;
    }
}

/// A sequence of requests and what to do with their replies.
pub(crate) trait Job {
    /// Encode the next request and return a tag for it, or None when there
    /// is nothing to send now (the pipeline asks again after each reply and
    /// ends when nothing is in flight and nothing is to be sent).
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError>;
    /// The reply to the request tagged `tag`. An error ends the job; the
    /// requests still in flight are abandoned.
    fn reply(
        &mut self,
        tag: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError>;

    /// Where the data of the read requests tagged `tags` (in the order
    /// their replies come) may be received directly: a slice per leading
    /// tag, as long as the data asked for, pushed to `out` until the first
    /// tag the job has no place for. A place may be written with other
    /// bytes before its reply is known ([`crate::inplace`]): hand out only
    /// places the data is going to be written to anyway.
    fn places<'s>(&'s mut self, tags: &[u64], out: &mut Vec<&'s mut [u8]>) {
        let _ = (tags, out);
    }

    /// The reply to the read tagged `tag` brought all the data asked for,
    /// and it is in the place [`Job::places`] gave.
    fn placed(&mut self, tag: u64, size: u64, eof: bool) -> Result<(), ClientError> {
        let _ = (tag, size, eof);
        Err(ClientError::Unexpected {
            server: ([0, 0, 0, 0], 0).into(),
            what: "internal error: a reply placed for a job without places".into(),
        })
    }
}

struct Outstanding {
    tag: u64,
    op: Op,
    msg: Vec<u8>,
    first_sent: Instant,
    last_sent: Instant,
    tries: u32,
    rto: Duration,
    patient: bool,
}

struct Rtt {
    srtt: Option<f64>,
    rttvar: f64,
    rto: Duration,
}

impl Rtt {
    fn sample(&mut self, r: Duration, t: &Timing) {
        let r = r.as_secs_f64();
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
        let rto = self.srtt.unwrap_or(r) + 4.0 * self.rttvar;
        self.rto = Duration::from_secs_f64(rto).clamp(t.min_rto, t.max_rto);
    }
}

pub(crate) struct Pipeline {
    conn: Conn,
    server: SocketAddr,
    session: u64,
    next_xid: u64,
    window: usize,
    horizon: u64,
    timing: Timing,
    rtt: Rtt,
    outstanding: BTreeMap<u64, Outstanding>,
    pool: Vec<Vec<u8>>,
    /// UDP: a batch of datagrams.
    udp_rx: Receiver,
    /// UDP: requests issued and not sent yet (their ids).
    udp_tx: Vec<u64>,
    /// TCP: replies read in chunks, parsed in place.
    frames: Option<FrameBuffer>,
    /// TCP: requests not written yet (whole frames only).
    tx: Vec<u8>,
    /// TCP: read replies received in place, and the state between reads.
    placer: Placer,
    /// Replies whose data is in its place, to be acted on.
    placed: Vec<Placed>,
    /// UDP: the highest request id answered so far.
    last_reply: u64,
    stats: ClientStats,
    /// An ICMP port unreachable came back (UDP): for the timeout message.
    refused: bool,
    /// Why a TCP stream can no longer be used.
    broken: Option<String>,
    read_timeout: Option<Duration>,
}

impl Pipeline {
    pub fn new(conn: Conn, server: SocketAddr, window: usize, timing: Timing) -> Pipeline {
        let tcp = matches!(conn, Conn::Tcp(_));
        Pipeline {
            conn,
            server,
            session: 0,
            next_xid: 1,
            window,
            horizon: u64::MAX,
            timing,
            rtt: Rtt {
                srtt: None,
                rttvar: 0.0,
                rto: timing.initial_rto,
            },
            outstanding: BTreeMap::new(),
            pool: Vec::new(),
            udp_rx: if tcp {
                Receiver::default()
            } else {
                Receiver::new()
            },
            udp_tx: Vec::new(),
            frames: tcp.then(|| FrameBuffer::with_capacity(CLIENT_RX)),
            tx: Vec::new(),
            placer: Placer::default(),
            placed: Vec::new(),
            last_reply: 0,
            stats: ClientStats::default(),
            refused: false,
            broken: None,
            read_timeout: None,
        }
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn set_window(&mut self, window: usize) {
        self.window = window;
    }

    pub fn set_horizon(&mut self, horizon: u64) {
        self.horizon = horizon.max(1);
    }

    pub fn is_udp(&self) -> bool {
        matches!(self.conn, Conn::Udp(_))
    }

    pub fn stats(&self) -> ClientStats {
        ClientStats {
            srtt: self.rtt.srtt.map(Duration::from_secs_f64),
            rto: self.rtt.rto,
            ..self.stats
        }
    }

    /// Run `job` to the end.
    pub fn run(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        if let Some(reason) = &self.broken {
            return Err(ClientError::ConnectionLost {
                server: self.server,
                reason: reason.clone(),
            });
        }
        let result = self.run_inner(job);
        if result.is_err() {
            for (_, o) in std::mem::take(&mut self.outstanding) {
                self.pool.push(o.msg);
            }
            // Abandoned with the requests above: whole frames, so the
            // stream stays in step (their ids are simply never answered).
            self.tx.clear();
            self.udp_tx.clear();
        }
        result
    }

    fn run_inner(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        loop {
            while self.outstanding.len() < self.window && self.within_horizon() {
                if !self.issue(job)? {
                    break;
                }
            }
            if self.outstanding.is_empty() {
                return Ok(());
            }
            self.wait(job)?;
        }
    }

    fn within_horizon(&self) -> bool {
        match self.outstanding.first_key_value() {
            Some((&oldest, _)) => self.next_xid - oldest < self.horizon,
            None => true,
        }
    }

    /// Ask the job for one request and send it; false if it had none.
    fn issue(&mut self, job: &mut dyn Job) -> Result<bool, ClientError> {
        let mut buf = self.pool.pop().unwrap_or_default();
        let xid = self.next_xid;
        let mut enc = Encoder {
            buf: &mut buf,
            session: self.session,
            xid,
            framed: !self.is_udp(),
            op: None,
            patient: false,
        };
        let Some(tag) = job.next(&mut enc)? else {
            self.pool.push(buf);
            return Ok(false);
        };
        let (Some(op), patient) = (enc.op, enc.patient) else {
            return Err(ClientError::Unexpected {
                server: self.server,
                what: "internal error: a job returned a tag without a request".into(),
            });
        };
        self.next_xid += 1;
        if self.is_udp() {
            // Sent with the others issued before the pipeline waits.
            self.udp_tx.push(xid);
        } else {
            self.send(&buf)?;
        }
        let now = Instant::now();
        let rto = if patient {
            self.rtt.rto.max(PATIENT_RTO)
        } else {
            self.rtt.rto
        };
        self.outstanding.insert(
            xid,
            Outstanding {
                tag,
                op,
                msg: buf,
                first_sent: now,
                last_sent: now,
                tries: 1,
                rto,
                patient,
            },
        );
        self.stats.requests += 1;
        Ok(true)
    }

    fn send(&mut self, msg: &[u8]) -> Result<(), ClientError> {
        match &mut self.conn {
            Conn::Udp(s) => match s.send(msg) {
                Ok(_) => Ok(()),
                // Lost like a dropped datagram; the retransmission covers it.
                Err(e) if udp_send_loss(&e) => {
                    if e.kind() == io::ErrorKind::ConnectionRefused {
                        self.refused = true;
                    }
                    Ok(())
                }
                Err(e) => Err(ClientError::io(format!("sending to {}", self.server), e)),
            },
            Conn::Tcp(_) => {
                // Queued; written before the client blocks for a reply.
                self.tx.extend_from_slice(msg);
                if self.tx.len() >= TX_FLUSH {
                    self.flush()?;
                }
                Ok(())
            }
        }
    }

    /// TCP: write the queued requests.
    fn flush(&mut self) -> Result<(), ClientError> {
        let Conn::Tcp(s) = &mut self.conn else {
            return Ok(());
        };
        if self.tx.is_empty() {
            return Ok(());
        }
        let written = s.write_all(&self.tx);
        self.tx.clear();
        written.map_err(|e| {
            let reason = format!("sending a request failed: {e}");
            self.broken = Some(reason.clone());
            ClientError::ConnectionLost {
                server: self.server,
                reason,
            }
        })
    }

    /// UDP: send the requests issued since the last wait, with one
    /// sendmmsg (the server's worker then finds them queued together and
    /// takes them with one call too). A request the kernel refuses to send
    /// for want of buffer space, or because an ICMP error came back, is
    /// lost like a dropped datagram: the retransmission covers it.
    fn flush_udp(&mut self) -> Result<(), ClientError> {
        let Conn::Udp(sock) = &self.conn else {
            return Ok(());
        };
        let msgs: Vec<&[u8]> = self
            .udp_tx
            .iter()
            .filter_map(|xid| self.outstanding.get(xid))
            .map(|o| &o.msg[..])
            .collect();
        let (mut refused, mut fatal) = (false, None);
        udp_io::send_connected(sock, &msgs, |_, e| {
            if !udp_send_loss(&e) {
                fatal.get_or_insert(e);
            } else if e.kind() == io::ErrorKind::ConnectionRefused {
                refused = true;
            }
        });
        self.udp_tx.clear();
        self.refused |= refused;
        match fatal {
            Some(e) => Err(ClientError::io(format!("sending to {}", self.server), e)),
            None => Ok(()),
        }
    }

    /// Wait for one reply (or a timeout) and act on it.
    fn wait(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        if !self.is_udp() {
            return self.wait_tcp(job);
        }
        self.flush_udp()?;
        let now = Instant::now();
        let deadline = self
            .outstanding
            .values()
            .map(|o| o.last_sent + o.rto)
            .min()
            .unwrap_or(now);
        if deadline <= now {
            return self.retransmit_expired(now);
        }
        self.set_read_timeout(deadline - now)?;
        match self.recv_udp(job) {
            Ok(()) => self.dispatch_udp(job),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                self.retransmit_expired(Instant::now())
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                self.refused = true;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(ClientError::io(
                format!("receiving from {}", self.server),
                e,
            )),
        }
    }

    fn set_read_timeout(&mut self, t: Duration) -> Result<(), ClientError> {
        // SO_RCVTIMEO has microsecond resolution; never zero (that means
        // "block forever" to the kernel and is refused by std).
        let t = t.max(Duration::from_micros(100));
        // A timeout up to a quarter shorter than asked for is kept: waking
        // a little early costs one more loop, while setting it on every
        // wait cost a system call per reply (the deadline moves with each
        // request sent). Never longer: that would retransmit late.
        if self
            .read_timeout
            .is_some_and(|cur| cur <= t && cur >= t - t / 4)
        {
            return Ok(());
        }
        let t = t - t / 4;
        let t = t.max(Duration::from_micros(100));
        let Conn::Udp(sock) = &self.conn else {
            return Ok(());
        };
        sock.set_read_timeout(Some(t))
            .map_err(|e| ClientError::io("setting a receive timeout", e))?;
        self.read_timeout = Some(t);
        Ok(())
    }

    fn retransmit_expired(&mut self, now: Instant) -> Result<(), ClientError> {
        let Conn::Udp(sock) = &self.conn else {
            return Ok(());
        };
        let t = self.timing;
        for o in self.outstanding.values_mut() {
            if o.last_sent + o.rto > now {
                continue;
            }
            // A hello refused again and again (ICMP port unreachable) means
            // no server: say so in a second instead of after every try.
            let no_server = self.refused && o.op == Op::Hello && o.tries >= REFUSED_HELLO_TRIES;
            if o.tries >= t.max_tries || no_server {
                return Err(ClientError::TimedOut {
                    server: self.server,
                    op: o.op,
                    tries: o.tries,
                    waited: now.duration_since(o.first_sent),
                    hint: if self.refused {
                        " (the port is closed: is the rfs server running there?)"
                    } else {
                        " (server down, or the path drops too much?)"
                    },
                });
            }
            match sock.send(&o.msg) {
                Ok(_) => {}
                Err(e) if udp_send_loss(&e) => {}
                Err(e) => return Err(ClientError::io(format!("sending to {}", self.server), e)),
            }
            o.tries += 1;
            o.last_sent = now;
            let cap = if o.patient {
                PATIENT_MAX_RTO
            } else {
                t.max_rto
            };
            o.rto = (o.rto * 2).min(cap);
            if !o.patient {
                // Back the estimate off too (until a clean sample).
                self.rtt.rto = self.rtt.rto.max(o.rto);
            }
            self.stats.retransmissions += 1;
        }
        Ok(())
    }

    /// TCP: dispatch the next buffered reply, reading more (after writing
    /// the queued requests) only when no whole reply is buffered.
    fn wait_tcp(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        let Some(mut frames) = self.frames.take() else {
            unreachable!("TCP pipelines have a frame buffer")
        };
        let result = self.next_tcp_reply(&mut frames, job);
        self.frames = Some(frames);
        result
    }

    fn next_tcp_reply(
        &mut self,
        frames: &mut FrameBuffer,
        job: &mut dyn Job,
    ) -> Result<(), ClientError> {
        loop {
            match frames.next_frame() {
                Ok(Some(frame)) => {
                    let result = self.dispatch_inner(frame, job);
                    frames.consume();
                    return result;
                }
                Ok(None) => {}
                Err(()) => {
                    let reason = format!(
                        "a reply frame with a length outside {}..={MAX_MESSAGE} bytes",
                        crate::protocol::HEADER_LEN
                    );
                    self.broken = Some(reason.clone());
                    return Err(ClientError::ConnectionLost {
                        server: self.server,
                        reason,
                    });
                }
            }
            self.flush()?;
            match self.read_tcp(frames, job) {
                Ok(0) => {
                    let reason = if frames.is_empty() && !self.placer.mid_reply() {
                        "the server closed the connection while a reply was awaited"
                    } else {
                        "the server closed the connection in the middle of a reply"
                    };
                    return Err(self.lost(reason.to_string()));
                }
                Ok(_) if !self.placed.is_empty() => return self.dispatch_placed(job),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let (op, since) = self
                        .outstanding
                        .values()
                        .next()
                        .map_or((Op::Hello, Instant::now()), |o| (o.op, o.first_sent));
                    self.broken = Some(format!("no reply within {:?}", self.timing.timeout));
                    return Err(ClientError::TimedOut {
                        server: self.server,
                        op,
                        tries: 1,
                        waited: since.elapsed(),
                        hint: " (server stuck or path down?)",
                    });
                }
                Err(e) => return Err(self.lost(format!("while a reply was awaited: {e}"))),
            }
        }
    }

    /// UDP: the datagrams queued on the socket (waiting for the first),
    /// the data of the read replies guessed right straight into their
    /// places ([`crate::udp_place`]: added to `placed`), the others kept
    /// whole in the receiver to be parsed as ever. Replies mostly come in
    /// the order of their requests, so the guesses are the reads in flight
    /// after the last reply, in order.
    fn recv_udp(&mut self, job: &mut dyn Job) -> io::Result<()> {
        let Conn::Udp(sock) = &self.conn else {
            unreachable!("UDP only")
        };
        let reads = || self.outstanding.iter().filter(|(_, o)| o.op == Op::Read);
        let guess = |after: u64| -> Vec<Expected> {
            reads()
                .filter(|(&xid, _)| xid > after)
                .take(udp_place::BATCH)
                .map(|(&xid, _)| Expected { xid, len: 0 })
                .collect()
        };
        let mut expected = guess(self.last_reply);
        if expected.is_empty() {
            // Only retransmitted reads are left: from the first.
            expected = guess(0);
        }
        let tags: Vec<u64> = expected
            .iter()
            .map(|e| self.outstanding[&e.xid].tag)
            .collect();
        let mut places = Vec::new();
        if !tags.is_empty() {
            job.places(&tags, &mut places);
        }
        expected.truncate(places.len());
        for (e, p) in expected.iter_mut().zip(&places) {
            e.len = p.len();
        }
        self.udp_rx
            .recv(sock, self.session, &expected, &mut places, &mut self.placed)?;
        if let Some(last) = self.placed.iter().map(|p| p.xid).max() {
            self.last_reply = self.last_reply.max(last);
        }
        Ok(())
    }

    /// UDP: act on the replies of the last batch, those in place first
    /// (the first error ends the job, as in `dispatch_inner`).
    fn dispatch_udp(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        let mut result = self.dispatch_placed(job);
        let rx = std::mem::take(&mut self.udp_rx);
        for i in 0..rx.unplaced() {
            if result.is_err() {
                break;
            }
            result = self.dispatch_inner(rx.whole(i), job);
        }
        self.udp_rx = rx;
        result
    }

    /// TCP: one read from the stream, the data of the read replies expected
    /// next straight into their places when the job has them
    /// ([`crate::inplace`]), else into `frames`.
    fn read_tcp(&mut self, frames: &mut FrameBuffer, job: &mut dyn Job) -> io::Result<usize> {
        let Conn::Tcp(stream) = &mut self.conn else {
            unreachable!("TCP only")
        };
        let mut tags = Vec::new();
        let mut expected = Vec::new();
        for (&xid, o) in self.outstanding.iter().take(MAX_PLACED) {
            if o.op != Op::Read {
                break;
            }
            tags.push(o.tag);
            expected.push(Expected { xid, len: 0 });
        }
        let mut places = Vec::new();
        if !tags.is_empty() || self.placer.mid_reply() {
            job.places(&tags, &mut places);
        }
        expected.truncate(places.len());
        for (e, p) in expected.iter_mut().zip(&places) {
            e.len = p.len();
        }
        let placed = self.placer.read(
            stream,
            frames,
            self.session,
            &expected,
            &mut places,
            &mut self.placed,
        )?;
        match placed {
            Some(n) => Ok(n),
            None => frames.fill(stream),
        }
    }

    /// Act on the replies whose data [`Pipeline::read_tcp`] put in place,
    /// in order (the first error ends the job, as in `dispatch_inner`).
    fn dispatch_placed(&mut self, job: &mut dyn Job) -> Result<(), ClientError> {
        let mut result = Ok(());
        for p in std::mem::take(&mut self.placed) {
            let Some(o) = self.outstanding.remove(&p.xid) else {
                continue;
            };
            if o.tries == 1 {
                self.rtt.sample(o.last_sent.elapsed(), &self.timing);
            }
            self.pool.push(o.msg);
            if result.is_ok() {
                result = job.placed(o.tag, p.size, p.eof);
            }
        }
        result
    }

    /// Mark the TCP stream unusable; the error to return.
    fn lost(&mut self, reason: String) -> ClientError {
        self.broken = Some(reason.clone());
        ClientError::ConnectionLost {
            server: self.server,
            reason,
        }
    }

    fn dispatch_inner(&mut self, msg: &[u8], job: &mut dyn Job) -> Result<(), ClientError> {
        let udp = self.is_udp();
        let (header, op, result) = match decode_reply(msg) {
            Ok(r) => r,
            Err(DecodeError::Version { got }) if self.answers_hello(msg) => {
                // A server of another version refused our hello (in its own
                // version's header): say so instead of timing out.
                return Err(ClientError::Version {
                    server: self.server,
                    theirs: got,
                });
            }
            Err(error) if udp => {
                let _ = error;
                self.stats.stray += 1;
                return Ok(());
            }
            Err(error) => {
                self.broken = Some(format!("malformed reply: {error}"));
                return Err(ClientError::Protocol {
                    server: self.server,
                    error,
                });
            }
        };
        if header.xid == 0 && !udp {
            // Request id 0 answers no request: the server's word on the
            // whole connection (BUSY when it is full), before it closes.
            let reason = match result {
                Err(error) => {
                    self.broken = Some(format!("the server refused the connection: {error}"));
                    return Err(ClientError::Remote {
                        server: self.server,
                        context: "connecting".into(),
                        error,
                    });
                }
                Ok(_) => "a reply under request id 0 that is not an error".to_string(),
            };
            return Err(self.lost(reason));
        }
        let matches = self
            .outstanding
            .get(&header.xid)
            .map(|o| o.op == op && (op == Op::Hello || header.session == self.session));
        match matches {
            Some(true) => {}
            None if header.xid < self.next_xid && header.session == self.session => {
                self.stats.late_replies += 1;
                return Ok(());
            }
            _ if udp => {
                self.stats.stray += 1;
                return Ok(());
            }
            _ => {
                let reason = format!(
                    "a {op} reply to request {} that is not in flight",
                    header.xid
                );
                self.broken = Some(reason.clone());
                return Err(ClientError::ConnectionLost {
                    server: self.server,
                    reason,
                });
            }
        }
        let Some(o) = self.outstanding.remove(&header.xid) else {
            return Ok(());
        };
        self.last_reply = self.last_reply.max(header.xid);
        if o.tries == 1 {
            self.rtt.sample(o.last_sent.elapsed(), &self.timing);
        }
        if op == Op::Hello && result.is_ok() {
            self.session = header.session;
        }
        self.pool.push(o.msg);
        job.reply(o.tag, result)
    }

    /// Whether `msg` has the header of a reply to our hello in flight.
    fn answers_hello(&self, msg: &[u8]) -> bool {
        decode_header(msg).is_ok_and(|(h, _)| {
            h.opcode == Op::Hello.code() | crate::protocol::REPLY_BIT
                && self
                    .outstanding
                    .get(&h.xid)
                    .is_some_and(|o| o.op == Op::Hello)
        })
    }

    /// Send one datagram without waiting for anything (a goodbye).
    pub fn send_once(&mut self, req: &Request<'_>) {
        let mut buf = Vec::new();
        let framed = !self.is_udp();
        if framed {
            buf.extend_from_slice(&[0u8; 4]);
        }
        if encode_request(self.session, self.next_xid, req, &mut buf).is_err() {
            return;
        }
        if framed {
            let len = (buf.len() - 4) as u32;
            buf[..4].copy_from_slice(&len.to_be_bytes());
        }
        self.next_xid += 1;
        let _ = self.send(&buf);
        let _ = self.flush();
    }
}

fn udp_send_loss(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ConnectionRefused
        || matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN))
}
