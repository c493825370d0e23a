//! `osprobe serve`: the far end of every network experiment.
//!
//! One thread accepts; each connection gets a thread with a small stack.
//! Resources are bounded up front: at most `max_clients` open sessions, at
//! most `max_connections` connections of any kind (the rest are answered
//! busy), every session cut off at `max_duration` by a reaper thread that
//! shuts its sockets down, per-connection buffers capped at
//! [`MAX_SERVER_BUFFER`].
//!
//! Before a peer has proved anything it gets little: one first frame of at
//! most [`protocol::MAX_FIRST_FRAME`] bytes, read within a total deadline
//! from accept (`handshake_timeout`), memory only for bytes that arrived;
//! and a place at the [`crate::gate`], which caps pending connections
//! per source and in all by evicting the oldest, and backs off sources
//! whose proofs failed. Busy refusals and evictions are summed up in one
//! log line a second; text a peer sent is escaped before it is logged.
//! File transfers reserve their bytes ([`crate::space`]) when admitted.
//!
//! The UDP socket on the same port echoes datagrams that start with the id
//! of an open echo session, and only back to the address of that session's
//! client: the echo is never larger than the request and cannot be aimed at
//! a third party.

use crate::auth::{self, Purpose};
use crate::gate::{self, Gate, Ticket};
use crate::protocol::{
    self, hex, random_bytes, ErrorCode, FrameError, Message, StreamReport, TestSpec, PROTOCOL_NAME,
    PROTOCOL_VERSION,
};
use crate::space::{self, Ledger, Reservation};
use crate::stream_error::RoleError;
use crate::transfer;
use osprobe_core::local_user;
use osprobe_core::scratch::ScratchDir;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The largest buffer a connection's handler allocates, whatever the
/// client asked for: a socket read rarely returns more than this anyway.
pub const MAX_SERVER_BUFFER: usize = 1 << 20;
/// Stack of a connection thread: handlers keep their buffers on the heap.
const HANDLER_STACK: usize = 256 * 1024;
/// Time allowed after the session's deadline for reports and clean-up.
const GRACE: Duration = Duration::from_secs(5);

/// Limits and settings of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Clients must prove they know this token.
    pub token: Option<String>,
    /// The longest session; longer requests are refused, sessions running
    /// past it are cut off.
    pub max_duration: Duration,
    /// Sessions open at once.
    pub max_clients: usize,
    /// Connections of any kind open at once.
    pub max_connections: usize,
    /// Where `osprobe send` files are stored; None refuses named files.
    pub dir: Option<PathBuf>,
    /// How long a peer may stay silent in the middle of a test.
    pub idle_timeout: Duration,
    /// How long a new connection may take, from accept, to send its first
    /// message: a total, not reset by each byte that trickles in.
    pub handshake_timeout: Duration,
    /// Pending (unauthenticated) connections per source and in all, and
    /// the back-off after failed proofs.
    pub gate: gate::Limits,
    /// The most this server keeps on disk: files in `dir` (those there at
    /// start included) plus transfers in progress (`--max-bytes`).
    pub max_bytes: Option<u64>,
    /// The port of the remote file service offered beside the tests
    /// (`serve --export`), announced in every hello.
    pub rfs_port: Option<u16>,
    /// The serving binary, named in the environment `Describe` answers with.
    pub build: osprobe_core::environment::BuildInfo,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            token: None,
            max_duration: Duration::from_secs(300),
            max_clients: 8,
            max_connections: 512,
            dir: None,
            idle_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
            gate: gate::Limits::default(),
            max_bytes: None,
            rfs_port: None,
            build: Default::default(),
        }
    }
}

/// Something a server operator wants to see in the log.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    SessionOpened {
        peer: SocketAddr,
        test: String,
    },
    SessionEnded {
        peer: SocketAddr,
        test: String,
        bytes: u64,
        seconds: f64,
    },
    FileStored {
        peer: SocketAddr,
        path: PathBuf,
        bytes: u64,
    },
    Refused {
        peer: SocketAddr,
        reason: String,
    },
    Failed {
        peer: SocketAddr,
        error: String,
    },
    /// Connections refused as busy, and pending ones evicted to make room,
    /// over the last `seconds` (summed up rather than logged one by one).
    Busy {
        refused: usize,
        evicted: usize,
        seconds: f64,
    },
}

impl fmt::Display for ServerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerEvent::SessionOpened { peer, test } => write!(f, "{peer}: started {test}"),
            ServerEvent::SessionEnded {
                peer,
                test,
                bytes,
                seconds,
            } => write!(
                f,
                "{peer}: finished {test}: {bytes} bytes in {seconds:.2} s"
            ),
            ServerEvent::FileStored { peer, path, bytes } => {
                write!(
                    f,
                    "{peer}: stored {} ({bytes} bytes, verified)",
                    path.display()
                )
            }
            ServerEvent::Refused { peer, reason } => write!(f, "{peer}: refused: {reason}"),
            ServerEvent::Failed { peer, error } => write!(f, "{peer}: {error}"),
            ServerEvent::Busy {
                refused,
                evicted,
                seconds,
            } => write!(
                f,
                "busy: in the last {seconds:.1} s, {refused} connection(s) refused, {evicted} unauthenticated one(s) evicted to make room"
            ),
        }
    }
}

/// Where events go: the CLI prints them, tests collect them.
pub type EventSink = Arc<dyn Fn(&ServerEvent) + Send + Sync>;

/// A bound server, ready to `serve`.
pub struct Server {
    listener: TcpListener,
    udp: UdpSocket,
    shared: Arc<Shared>,
}

struct Shared {
    config: ServerConfig,
    events: EventSink,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    connections: AtomicUsize,
    gate: Arc<Gate>,
    /// Disk space promised to transfers and kept.
    space: Arc<Ledger>,
    /// Connections refused as busy since the last summary log line.
    refused_busy: AtomicUsize,
    /// Where unnamed test files are written; created on first use.
    scratch: Mutex<Option<ScratchDir>>,
    /// Answers `Describe`: this machine and the connection's interface.
    describer: crate::describe::Describer,
    stopping: AtomicBool,
    /// The TCP port, whose local peers must be this process's user or
    /// root when there is no token ([`osprobe_core::local_user`]).
    port: u16,
}

struct Session {
    id: String,
    spec: TestSpec,
    peer: SocketAddr,
    deadline: Instant,
    /// Set when the session must end: deadline, control gone, shutdown.
    closed: AtomicBool,
    state: Mutex<SessionState>,
    changed: Condvar,
    /// The disk space promised to this session's files.
    space: Mutex<Option<Reservation>>,
}

#[derive(Default)]
struct SessionState {
    attached: Vec<bool>,
    reports: Vec<Option<StreamReport>>,
    /// Received files waiting for the sender's hash (named files).
    received: Vec<Option<transfer::RxReport>>,
    /// Clones of the data sockets, so the reaper can shut them down.
    sockets: Vec<TcpStream>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for s in &self.lock().sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.changed.notify_all();
    }
}

/// Counts a connection while it lives.
struct ConnectionSlot(Arc<Shared>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    /// Bind TCP and UDP on `addr` (port 0 picks a free port for both).
    pub fn bind(addr: SocketAddr, config: ServerConfig, events: EventSink) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let tcp_addr = listener.local_addr()?;
        let udp = UdpSocket::bind(tcp_addr).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP echo on {tcp_addr}: {e}"))
        })?;
        listener.set_nonblocking(true)?;
        udp.set_read_timeout(Some(Duration::from_millis(200)))?;
        if let Some(dir) = &config.dir {
            if !dir.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("--dir {}: not a directory", dir.display()),
                ));
            }
        }
        let swept = config.dir.as_deref().map_or(0, transfer::sweep_partials);
        let kept = config.dir.as_deref().map_or(0, space::bytes_in);
        if swept > 0 {
            events(&ServerEvent::Failed {
                peer: tcp_addr,
                error: format!("removed {swept} partial file(s) an earlier server left behind"),
            });
        }
        Ok(Server {
            listener,
            udp,
            shared: Arc::new(Shared {
                gate: Gate::new(config.gate.clone()),
                describer: crate::describe::Describer::new(config.build.clone()),
                space: Ledger::new(config.max_bytes, kept),
                config,
                events,
                sessions: Mutex::new(HashMap::new()),
                connections: AtomicUsize::new(0),
                refused_busy: AtomicUsize::new(0),
                scratch: Mutex::new(None),
                stopping: AtomicBool::new(false),
                port: tcp_addr.port(),
            }),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `stop` is set; then end every session.
    pub fn serve(&self, stop: &AtomicBool) -> io::Result<()> {
        std::thread::scope(|scope| {
            scope.spawn(|| self.udp_echo(stop));
            scope.spawn(|| self.reap(stop));
            let result = self.accept_loop(stop);
            self.shared.stopping.store(true, Ordering::SeqCst);
            for session in self.shared.sessions().values() {
                session.close();
            }
            result
        })
    }

    fn accept_loop(&self, stop: &AtomicBool) -> io::Result<()> {
        while !stop.load(Ordering::SeqCst) {
            if !crate::sock::wait_readable(self.listener.as_raw_fd(), Duration::from_millis(100))? {
                continue;
            }
            let (stream, peer) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) if is_transient_accept_error(&e) => {
                    // Out of descriptors, the listener stays readable: pause
                    // rather than spin until a connection ends.
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        self.shared.refused_busy.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let accepted = Instant::now();
            let shared = Arc::clone(&self.shared);
            let open = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
            let slot = ConnectionSlot(Arc::clone(&shared));
            if open > shared.config.max_connections {
                shared.refuse_busy(&stream, "too many connections");
                continue;
            }
            let ticket = match shared.gate.admit(&stream, peer.ip()) {
                Ok(ticket) => ticket,
                Err(_) => {
                    shared.refuse_busy(&stream, "out of descriptors");
                    continue;
                }
            };
            let spawned = std::thread::Builder::new()
                .name("osprobe-serve".into())
                .stack_size(HANDLER_STACK)
                .spawn(move || {
                    let _slot = slot;
                    shared.handle_connection(stream, peer, accepted, ticket);
                });
            if let Err(e) = spawned {
                self.shared.emit(ServerEvent::Failed {
                    peer,
                    error: format!("cannot start a thread: {e}"),
                });
            }
        }
        Ok(())
    }

    /// End sessions past their deadline; once a second, sum up the busy
    /// refusals and evictions (one log line per refusal would let a flood
    /// flood the log too).
    fn reap(&self, stop: &AtomicBool) {
        let mut last_summary = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let now = Instant::now();
            if now.duration_since(last_summary) >= Duration::from_secs(1) {
                self.shared
                    .log_busy_summary(now.duration_since(last_summary));
                last_summary = now;
            }
            for session in self.shared.sessions().values() {
                if now > session.deadline && !session.closed.load(Ordering::SeqCst) {
                    session.close();
                }
            }
        }
    }

    fn udp_echo(&self, stop: &AtomicBool) {
        let mut buf = vec![0u8; protocol::MAX_ECHO_SIZE as usize + 16];
        while !stop.load(Ordering::SeqCst) {
            let (len, from) = match self.udp.recv_from(&mut buf) {
                Ok(got) => got,
                Err(_) => continue, // timeouts and ICMP errors from earlier sends
            };
            if len < 16 {
                continue;
            }
            let id = hex(&buf[..16]);
            let allowed = self.shared.sessions().get(&id).is_some_and(|s| {
                matches!(s.spec, TestSpec::Echo { .. })
                    && s.peer.ip() == from.ip()
                    && !s.closed.load(Ordering::Relaxed)
            });
            if allowed {
                let _ = self.udp.send_to(&buf[..len], from);
            }
        }
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EPROTO)
    )
}

/// A refusal: the code for the client and a sentence for both sides; the
/// last field says whether the client is gone (no use telling it).
struct Refusal(ErrorCode, String, PeerGone);

/// Whether the client closed its connection: a refusal is then only logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerGone(bool);

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal(code, message.into(), PeerGone(false))
    }

    /// The client closed the connection (`message` says when).
    fn gone(message: impl Into<String>) -> Refusal {
        Refusal(ErrorCode::Protocol, message.into(), PeerGone(true))
    }

    /// Reading the client's Finish failed with `e`.
    fn reading_finish(e: FrameError) -> Refusal {
        match e {
            FrameError::Closed => {
                Refusal::gone("client closed the control connection before finishing")
            }
            FrameError::Truncated => Refusal::gone(format!("reading finish: {e}")),
            other => Refusal::new(ErrorCode::Protocol, format!("reading finish: {other}")),
        }
    }
}

impl Shared {
    fn emit(&self, event: ServerEvent) {
        (self.events)(&event);
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refuse(&self, mut stream: &TcpStream, peer: SocketAddr, code: ErrorCode, message: &str) {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = protocol::write_message(
            &mut stream,
            &Message::Error {
                code,
                message: message.to_string(),
            },
        );
        self.emit(ServerEvent::Refused {
            peer,
            reason: message.to_string(),
        });
    }

    /// Answer busy and close, from the accept thread: the write never
    /// waits (a fresh socket's buffer takes a small frame), and the refusal
    /// is counted for the summary line instead of logged one by one.
    fn refuse_busy(&self, stream: &TcpStream, why: &str) {
        let _ = stream.set_nonblocking(true);
        let mut out = stream;
        let _ = protocol::write_message(
            &mut out,
            &Message::Error {
                code: ErrorCode::Busy,
                message: format!("server busy ({why}); try again"),
            },
        );
        self.refused_busy.fetch_add(1, Ordering::Relaxed);
    }

    fn log_busy_summary(&self, over: Duration) {
        let refused = self.refused_busy.swap(0, Ordering::Relaxed);
        let evicted = self.gate.take_evicted();
        if refused + evicted == 0 {
            return;
        }
        self.emit(ServerEvent::Busy {
            refused,
            evicted,
            seconds: over.as_secs_f64(),
        });
    }

    /// Sleep out the back-off of `peer`'s source before its proof is
    /// checked; false if the connection was evicted meanwhile.
    fn wait_out_backoff(&self, peer: SocketAddr, ticket: &Ticket) -> bool {
        let wait = self.gate.backoff(peer.ip());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        !ticket.evicted()
    }

    fn handle_connection(
        self: &Arc<Self>,
        mut stream: TcpStream,
        peer: SocketAddr,
        accepted: Instant,
        ticket: Ticket,
    ) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(self.config.handshake_timeout));
        let Some(nonce) = self.say_hello(&mut stream, peer) else {
            return;
        };
        let Some(first) = self.read_first(&stream, peer, accepted, &ticket) else {
            return;
        };
        let _ = stream.set_write_timeout(Some(self.config.idle_timeout));
        // Evicted after its first message was read whole: a session opened
        // now would end at once, and its client's streams would find none.
        if !ticket.ready() {
            self.refuse_busy(&stream, "too many connections waiting to authenticate");
            return;
        }
        // A backed-off source waits before its Open proof is checked. An
        // Attach's proof is checked only for a session that exists, whose
        // random id only an authenticated client (or someone on the path,
        // who could as well guess offline from a nonce and proof it saw)
        // knows: it is not a way to guess, and a client behind a shared
        // address would wait once per stream for nothing.
        let opens = matches!(first, Message::Open { .. } | Message::Describe { .. });
        if opens && self.config.token.is_some() && !self.wait_out_backoff(peer, &ticket) {
            self.refuse_busy(&stream, "too many connections waiting to authenticate");
            return;
        }
        self.answer_first(stream, peer, &nonce, first, ticket)
    }

    /// Send the hello with a fresh nonce; the nonce, or None when the
    /// connection is over (no randomness, or the peer gone already).
    fn say_hello(&self, stream: &mut TcpStream, peer: SocketAddr) -> Option<String> {
        let nonce = match random_bytes::<32>() {
            Ok(bytes) => hex(&bytes),
            Err(e) => {
                self.emit(ServerEvent::Failed {
                    peer,
                    error: format!("no random nonce: {e}"),
                });
                return None;
            }
        };
        let hello = Message::Hello {
            protocol: PROTOCOL_NAME.into(),
            version: PROTOCOL_VERSION,
            nonce: nonce.clone(),
            auth_required: self.config.token.is_some(),
            max_duration_s: self.config.max_duration.as_secs().min(u32::MAX as u64) as u32,
            rfs_port: self.config.rfs_port,
        };
        // An error: gone already, e.g. a net.connect probe.
        protocol::write_message(stream, &hello).ok()?;
        Some(nonce)
    }

    /// The peer's first message: before it has proved anything, one small
    /// frame, within a total deadline from accept. None when the
    /// connection is over (refused, or closed as net.connect does).
    fn read_first(
        &self,
        stream: &TcpStream,
        peer: SocketAddr,
        accepted: Instant,
        ticket: &Ticket,
    ) -> Option<Message> {
        let deadline = accepted + self.config.handshake_timeout;
        let mut reader = protocol::DeadlineReader::new(stream, deadline);
        match protocol::read_message_limited(&mut reader, protocol::MAX_FIRST_FRAME) {
            Ok(msg) => Some(msg),
            Err(_) if ticket.evicted() => {
                self.refuse_busy(stream, "too many connections waiting to authenticate");
                None
            }
            // Connecting and closing is what net.connect does: not an error.
            Err(FrameError::Closed) => None,
            Err(e) => {
                let code = match e {
                    FrameError::TimedOut => ErrorCode::Timeout,
                    _ => ErrorCode::Protocol,
                };
                self.refuse(stream, peer, code, &format!("first message: {e}"));
                None
            }
        }
    }

    /// Go on as the first message asks: a session, a stream of one, or a
    /// description of this machine.
    fn answer_first(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        nonce: &str,
        first: Message,
        ticket: Ticket,
    ) {
        match first {
            Message::Open {
                version,
                proof,
                duration_s,
                test,
            } => {
                let request = OpenRequest {
                    version,
                    proof,
                    duration_s,
                    test,
                };
                self.control(stream, peer, nonce, request, ticket)
            }
            Message::Attach {
                session,
                stream: index,
                proof,
            } => {
                let request = AttachRequest {
                    session,
                    index,
                    proof,
                };
                self.data(stream, peer, nonce, request, ticket)
            }
            Message::Describe { version, proof } => {
                self.describe(stream, peer, nonce, version, proof.as_deref())
            }
            other => self.refuse(
                &stream,
                peer,
                ErrorCode::Protocol,
                &format!("expected open, attach or describe, got {}", other.kind()),
            ),
        }
    }

    /// Answer `Describe` with this machine and the interface the
    /// connection arrived on, then close.
    fn describe(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
        nonce: &str,
        version: u32,
        proof: Option<&str>,
    ) {
        if version != PROTOCOL_VERSION {
            let message = format!(
                "client speaks protocol version {version}, this server {PROTOCOL_VERSION}: use the same osprobe version on both ends"
            );
            return self.refuse(&stream, peer, ErrorCode::Version, &message);
        }
        if let Err(Refusal(code, message, _)) =
            self.check_proof(peer, nonce, Purpose::Describe, proof)
        {
            return self.refuse(&stream, peer, code, &message);
        }
        let local = match stream.local_addr() {
            Ok(a) => a.ip(),
            Err(e) => {
                let message = format!("no local address: {e}");
                return self.refuse(&stream, peer, ErrorCode::Internal, &message);
            }
        };
        let (environment, nic) = self.describer.describe(local, peer.ip());
        let answer = Message::Described {
            environment: Box::new(environment),
            nic: nic.map(Box::new),
        };
        if let Err(e) = protocol::write_message(&mut stream, &answer) {
            self.emit(ServerEvent::Failed {
                peer,
                error: format!("describing this machine: {e}"),
            });
        }
    }

    /// Check the proof of the token; a wrong one backs its source off.
    fn check_proof(
        &self,
        peer: SocketAddr,
        nonce: &str,
        purpose: Purpose,
        proof: Option<&str>,
    ) -> Result<(), Refusal> {
        let Some(token) = &self.config.token else {
            // Without a token, the other users of this host are strangers too.
            return local_user::check(local_user::Proto::Tcp, peer, self.port)
                .map_err(|e| Refusal::new(ErrorCode::Auth, e.to_string()));
        };
        match proof {
            Some(p) if auth::verify(token, nonce, purpose, p) => Ok(()),
            Some(_) => {
                let backoff = self.gate.failed(peer.ip());
                Err(Refusal::new(
                    ErrorCode::Auth,
                    format!(
                        "wrong token (proofs from {} are now checked after {} ms)",
                        gate::Source::of(peer.ip()),
                        backoff.as_millis()
                    ),
                ))
            }
            None => Err(Refusal::new(
                ErrorCode::Auth,
                "this server requires a token (--token-file PATH or OSPROBE_TOKEN)",
            )),
        }
    }

    fn open_session(
        &self,
        peer: SocketAddr,
        nonce: &str,
        request: &OpenRequest,
    ) -> Result<Arc<Session>, Refusal> {
        if request.version != PROTOCOL_VERSION {
            return Err(Refusal::new(
                ErrorCode::Version,
                format!(
                    "client speaks protocol version {}, this server {PROTOCOL_VERSION}: use the same osprobe version on both ends",
                    request.version
                ),
            ));
        }
        let purpose = Purpose::Open {
            test: &request.test,
            duration_s: request.duration_s,
        };
        self.check_proof(peer, nonce, purpose, request.proof.as_deref())?;
        let max = self.config.max_duration.as_secs();
        if request.duration_s as u64 > max {
            return Err(Refusal::new(
                ErrorCode::Invalid,
                format!(
                    "the test asks for {} s; this server allows at most {max} s (--max-duration)",
                    request.duration_s
                ),
            ));
        }
        let reservation = self.reserve_storage(&request.test)?;
        let id = hex(&random_bytes::<16>().map_err(|e| {
            Refusal::new(ErrorCode::Internal, format!("no random session id: {e}"))
        })?);
        let streams = request.test.streams() as usize;
        let session = Arc::new(Session {
            id: id.clone(),
            spec: request.test.clone(),
            peer,
            deadline: Instant::now() + Duration::from_secs(request.duration_s as u64) + GRACE,
            closed: AtomicBool::new(false),
            state: Mutex::new(SessionState {
                attached: vec![false; streams],
                reports: vec![None; streams],
                received: (0..streams).map(|_| None).collect(),
                sockets: Vec::new(),
            }),
            changed: Condvar::new(),
            space: Mutex::new(reservation),
        });
        let mut sessions = self.sessions();
        if sessions.len() >= self.config.max_clients {
            return Err(Refusal::new(
                ErrorCode::Busy,
                format!(
                    "{} clients are being served (--max-clients); try again later",
                    sessions.len()
                ),
            ));
        }
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Refusal::new(ErrorCode::Busy, "the server is shutting down"));
        }
        sessions.insert(id, Arc::clone(&session));
        Ok(session)
    }

    /// Named files need a --dir and a name that stays inside it; every
    /// file test reserves its bytes (free space, --max-bytes) up front.
    fn reserve_storage(&self, test: &TestSpec) -> Result<Option<Reservation>, Refusal> {
        let TestSpec::File {
            streams,
            bytes,
            name,
            ..
        } = test
        else {
            return Ok(None);
        };
        let total = bytes.saturating_mul(*streams as u64);
        let dir = match name {
            Some(name) => {
                let Some(dir) = &self.config.dir else {
                    return Err(Refusal::new(
                        ErrorCode::Storage,
                        "this server does not accept files (start it with `osprobe serve --dir DIR`)",
                    ));
                };
                if *streams != 1 {
                    return Err(Refusal::new(
                        ErrorCode::Invalid,
                        "a named file travels on one stream",
                    ));
                }
                transfer::confine(dir, name)
                    .map_err(|e| Refusal::new(ErrorCode::Storage, e.to_string()))?;
                dir.clone()
            }
            None => self.scratch_dir().map_err(|e| {
                Refusal::new(ErrorCode::Storage, format!("no scratch directory: {e}"))
            })?,
        };
        self.space
            .reserve(&dir, total)
            .map(Some)
            .map_err(|e| Refusal::new(ErrorCode::Storage, e.to_string()))
    }

    fn scratch_dir(&self) -> io::Result<PathBuf> {
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if scratch.is_none() {
            *scratch = Some(ScratchDir::new()?);
        }
        Ok(scratch
            .as_ref()
            .map(|s| s.path().to_path_buf())
            .unwrap_or_default())
    }

    fn control(
        self: &Arc<Self>,
        mut stream: TcpStream,
        peer: SocketAddr,
        nonce: &str,
        request: OpenRequest,
        ticket: Ticket,
    ) {
        let opened = self.open_session(peer, nonce, &request);
        drop(ticket); // authenticated, or about to close
        let session = match opened {
            Ok(s) => s,
            Err(Refusal(code, message, _)) => {
                self.refuse(&stream, peer, code, &message);
                return;
            }
        };
        let test = describe(&session.spec);
        self.emit(ServerEvent::SessionOpened {
            peer,
            test: test.clone(),
        });
        let started = Instant::now();
        let outcome = self.run_control(&mut stream, &session);
        session.close();
        self.sessions().remove(&session.id);
        discard_unclaimed_files(&session);
        match outcome {
            Ok(bytes) => self.emit(ServerEvent::SessionEnded {
                peer,
                test,
                bytes,
                seconds: started.elapsed().as_secs_f64(),
            }),
            Err(Refusal(code, message, PeerGone(gone))) => {
                if !gone {
                    let _ = protocol::write_message(
                        &mut stream,
                        &Message::Error {
                            code,
                            message: message.clone(),
                        },
                    );
                }
                self.emit(ServerEvent::Failed {
                    peer,
                    error: format!("{test}: {message}"),
                });
            }
        }
    }

    /// Opened, then wait for Finish, the streams, and report. Returns the
    /// bytes received over all streams.
    fn run_control(&self, stream: &mut TcpStream, session: &Arc<Session>) -> Result<u64, Refusal> {
        let opened = Message::Opened {
            session: session.id.clone(),
        };
        protocol::write_message(stream, &opened)
            .map_err(|e| Refusal::new(ErrorCode::Protocol, format!("sending opened: {e}")))?;
        let hashes = loop {
            let left = session.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refusal::new(
                    ErrorCode::Timeout,
                    format!(
                        "session ran past its {} s limit",
                        self.config.max_duration.as_secs()
                    ),
                ));
            }
            let _ = stream.set_read_timeout(Some(left.min(Duration::from_secs(1))));
            match protocol::read_message(stream) {
                Ok(Message::Finish { hashes }) => break hashes,
                Ok(other) => {
                    return Err(Refusal::new(
                        ErrorCode::Protocol,
                        format!("expected finish, got {}", other.kind()),
                    ))
                }
                Err(FrameError::TimedOut) => continue,
                Err(e) => return Err(Refusal::reading_finish(e)),
            }
        };
        let mut reports = self.wait_for_streams(session);
        self.store_named_files(session, &hashes, &mut reports);
        let bytes = reports.iter().map(|r| r.bytes).sum();
        protocol::write_message(stream, &Message::Report { streams: reports })
            .map_err(|e| Refusal::new(ErrorCode::Protocol, format!("sending report: {e}")))?;
        Ok(bytes)
    }

    /// Every stream's report, once all attached streams are done or the
    /// deadline passed; streams that never attached are reported as such.
    fn wait_for_streams(&self, session: &Session) -> Vec<StreamReport> {
        let mut state = session.lock();
        loop {
            let pending = state
                .attached
                .iter()
                .zip(&state.reports)
                .any(|(attached, report)| *attached && report.is_none());
            let left = session.deadline.saturating_duration_since(Instant::now());
            if !pending || left.is_zero() {
                break;
            }
            state = session
                .changed
                .wait_timeout(state, left.min(Duration::from_millis(200)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        (0..state.reports.len())
            .map(|i| {
                state.reports[i].clone().unwrap_or_else(|| StreamReport {
                    stream: i as u32,
                    error: Some(if state.attached[i] {
                        "stream did not finish in time".into()
                    } else {
                        "stream never attached".into()
                    }),
                    ..StreamReport::default()
                })
            })
            .collect()
    }

    fn store_named_files(
        &self,
        session: &Session,
        hashes: &[Option<String>],
        reports: &mut [StreamReport],
    ) {
        let TestSpec::File {
            name: Some(name), ..
        } = &session.spec
        else {
            return;
        };
        let Some(dir) = &self.config.dir else { return };
        let Some(rx) = session.lock().received[0].take() else {
            return;
        };
        let report = &mut reports[0];
        let outcome = match (
            hashes.first().cloned().flatten(),
            transfer::confine(dir, name),
        ) {
            (Some(expected), Ok(path)) => {
                transfer::commit(&rx, &expected, &path, false).map(|()| path)
            }
            (None, _) => {
                transfer::discard(&rx);
                report.error = Some("the sender sent no hash: file not kept".into());
                report.stored = Some(false);
                return;
            }
            (_, Err(e)) => {
                transfer::discard(&rx);
                Err(e)
            }
        };
        match outcome {
            Ok(path) => {
                report.stored = Some(true);
                let reservation = session
                    .space
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(reservation) = reservation {
                    reservation.kept();
                }
                self.emit(ServerEvent::FileStored {
                    peer: session.peer,
                    path,
                    bytes: rx.bytes,
                });
            }
            Err(e) => {
                report.stored = Some(false);
                report.error = Some(format!("file not kept: {e}"));
            }
        }
    }

    fn data(
        self: &Arc<Self>,
        mut stream: TcpStream,
        peer: SocketAddr,
        nonce: &str,
        request: AttachRequest,
        ticket: Ticket,
    ) {
        let index = request.index;
        let attached = self.attach(
            &stream,
            peer,
            nonce,
            &request.session,
            index,
            request.proof.as_deref(),
        );
        drop(ticket); // authenticated, or about to close
        let session = match attached {
            Ok(s) => s,
            Err(Refusal(code, message, _)) => {
                self.refuse(&stream, peer, code, &message);
                return;
            }
        };
        if let Err(e) = self.prepare_role(&stream, &session.spec) {
            self.refuse(
                &stream,
                peer,
                ErrorCode::Internal,
                &format!("preparing the stream: {e}"),
            );
            session.changed.notify_all();
            return;
        }
        if protocol::write_message(&mut stream, &Message::Attached {}).is_err() {
            return;
        }
        if matches!(session.spec, TestSpec::Sink { .. } | TestSpec::File { .. }) {
            // Answering Attach right after receiving it put the socket in
            // "ping-pong" (interactive) mode, in which the kernel delays ACKs
            // and skips the ACK on reading; a bulk receiver must not stay in
            // it. Setting TCP_QUICKACK leaves that mode.
            let _ =
                crate::sock::set_int(stream.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
        }
        if let TestSpec::Sink { cpu: Some(cpu), .. } = session.spec {
            // A CPU this process may not use is ignored: the client asked
            // for a placement, not for the test to fail.
            let allowed = osprobe_core::affinity::allowed_cpus().unwrap_or_default();
            if allowed.contains(&(cpu as usize)) {
                let _ = osprobe_core::affinity::pin_current_thread(cpu as usize);
            }
        }
        let cpu_start = crate::sock::thread_cpu_time();
        let mut report = self.run_role(&stream, &session, index);
        report.stream = index;
        report.cpu_ns =
            (crate::sock::thread_cpu_time().saturating_sub(cpu_start)).as_nanos() as u64;
        if let Some(e) = &report.error {
            self.emit(ServerEvent::Failed {
                peer,
                error: format!("stream {index} of {}: {e}", describe(&session.spec)),
            });
        }
        session.lock().reports[index as usize] = Some(report);
        session.changed.notify_all();
    }

    fn attach(
        &self,
        stream: &TcpStream,
        peer: SocketAddr,
        nonce: &str,
        session_id: &str,
        index: u32,
        proof: Option<&str>,
    ) -> Result<Arc<Session>, Refusal> {
        let session = self.sessions().get(session_id).cloned().ok_or_else(|| {
            Refusal::new(
                ErrorCode::Session,
                "no such session (finished, timed out or never opened)",
            )
        })?;
        let purpose = Purpose::Attach {
            session: session_id,
            stream: index,
        };
        self.check_proof(peer, nonce, purpose, proof)?;
        let mut state = session.lock();
        let streams = state.attached.len();
        match state.attached.get_mut(index as usize) {
            None => Err(Refusal::new(
                ErrorCode::Invalid,
                format!("stream {index} does not exist: the session has {streams}"),
            )),
            Some(true) => Err(Refusal::new(
                ErrorCode::Session,
                format!("stream {index} is already attached"),
            )),
            Some(attached) => {
                *attached = true;
                let clone = stream.try_clone().map_err(|e| {
                    Refusal::new(ErrorCode::Internal, format!("cannot track the stream: {e}"))
                })?;
                state.sockets.push(clone);
                drop(state);
                if session.closed.load(Ordering::SeqCst) {
                    return Err(Refusal::new(ErrorCode::Session, "the session has ended"));
                }
                Ok(session)
            }
        }
    }

    /// Socket settings that must be in place before the client sends data.
    fn prepare_role(&self, stream: &TcpStream, spec: &TestSpec) -> io::Result<()> {
        stream.set_read_timeout(Some(self.config.idle_timeout))?;
        match spec {
            TestSpec::Echo { .. } => stream.set_nodelay(true),
            TestSpec::AckStall { segment, .. } => {
                stream.set_nodelay(false)?;
                crate::ack_stall::prepare_receiver(stream, *segment as usize)
            }
            _ => Ok(()),
        }
    }

    fn run_role(&self, stream: &TcpStream, session: &Session, index: u32) -> StreamReport {
        let result = match &session.spec {
            TestSpec::Echo { size, .. } => echo(stream, *size as usize, &session.closed),
            TestSpec::Sink { read_size, .. } => crate::sink::sink(
                stream,
                (*read_size as usize).min(MAX_SERVER_BUFFER),
                &session.closed,
            ),
            TestSpec::File {
                bytes,
                packet,
                name,
                zero_copy,
                ..
            } => {
                let how = if *zero_copy {
                    Receive::Spliced
                } else {
                    Receive::Packets(*packet as usize)
                };
                self.receive_file(stream, session, index, *bytes, how, name.as_deref())
            }
            TestSpec::AckStall { quickack, .. } => ack_stall_receiver(stream, *quickack, session),
            TestSpec::Source {
                write_size,
                duration_ms,
                cpu,
                ..
            } => crate::modes::source(
                stream,
                (*write_size as usize).min(MAX_SERVER_BUFFER),
                Duration::from_millis(*duration_ms as u64),
                *cpu,
                &session.closed,
            ),
            TestSpec::UdpSink { size } => match session_id_bytes(&session.id) {
                Some(id) => crate::modes::udp_sink(
                    stream,
                    id,
                    session.peer.ip(),
                    *size as usize,
                    &session.closed,
                ),
                None => Err(RoleError::MalformedSessionId),
            },
            TestSpec::Crr { size } => crate::modes::crr(
                stream,
                session.peer.ip(),
                *size as usize,
                self.config.idle_timeout,
                &session.closed,
            ),
        };
        match result {
            Ok(mut report) => {
                if report.tcp_info.is_none() {
                    report.tcp_info = crate::tcp_info::tcp_info(stream.as_raw_fd())
                        .ok()
                        .and_then(|info| serde_json::to_value(info).ok());
                }
                report
            }
            Err(error) => StreamReport {
                error: Some(if session.closed.load(Ordering::SeqCst) {
                    format!("cut off at the session's deadline or end ({error})")
                } else {
                    error.to_string()
                }),
                ..StreamReport::default()
            },
        }
    }

    fn receive_file(
        &self,
        stream: &TcpStream,
        session: &Session,
        index: u32,
        bytes: u64,
        how: Receive,
        name: Option<&str>,
    ) -> Result<StreamReport, RoleError> {
        let dest = match (name, &self.config.dir) {
            (Some(name), Some(dir)) => transfer::confine(dir, name)?,
            _ => self
                .scratch_dir()
                .map_err(RoleError::Scratch)?
                .join(format!("stream-{}-{index}", session.id)),
        };
        let idle = self.config.idle_timeout;
        let rx = match how {
            Receive::Packets(packet) => transfer::receive_file(
                stream,
                &dest,
                bytes,
                packet.min(MAX_SERVER_BUFFER),
                &session.closed,
                idle,
            ),
            Receive::Spliced => {
                transfer::receive_file_spliced(stream, &dest, bytes, &session.closed, idle)
            }
        }?;
        let report = StreamReport {
            bytes: rx.bytes,
            elapsed_ns: rx.elapsed.as_nanos() as u64,
            hash: Some(rx.hash.clone()),
            ..StreamReport::default()
        };
        if name.is_some() {
            // Kept as a partial file until the sender's hash arrives.
            session.lock().received[index as usize] = Some(rx);
        } else {
            transfer::discard(&rx);
        }
        Ok(report)
    }
}

/// How a file stream is received.
enum Receive {
    /// Reads of this many bytes, each written to the file.
    Packets(usize),
    /// splice(2) from the socket through a pipe into the file.
    Spliced,
}

struct AttachRequest {
    session: String,
    index: u32,
    proof: Option<String>,
}

struct OpenRequest {
    version: u32,
    proof: Option<String>,
    duration_s: u32,
    test: TestSpec,
}

fn describe(spec: &TestSpec) -> String {
    match spec {
        TestSpec::Echo { streams, size } => format!("echo ({streams} streams, {size} B)"),
        TestSpec::Sink {
            streams, read_size, ..
        } => {
            format!("sink ({streams} streams, {read_size} B reads)")
        }
        TestSpec::File {
            streams,
            bytes,
            packet,
            name,
            ..
        } => match name {
            Some(name) => format!(
                "file '{}' ({bytes} B)",
                osprobe_core::peer_text::escape(name, osprobe_core::peer_text::MAX_CHARS)
            ),
            None => format!("file test ({streams} x {bytes} B, {packet} B packets)"),
        },
        TestSpec::AckStall { segment, quickack } => format!(
            "ack stall ({segment} B segments, {})",
            if *quickack {
                "quickack"
            } else {
                "delayed acks"
            }
        ),
        TestSpec::Source {
            streams,
            write_size,
            duration_ms,
            ..
        } => format!("source ({streams} streams, {write_size} B writes, {duration_ms} ms)"),
        TestSpec::UdpSink { size } => format!("UDP sink ({size} B datagrams)"),
        TestSpec::Crr { size } => format!("connect/request/response ({size} B)"),
    }
}

/// The 16 bytes of a session id (32 hex digits).
fn session_id_bytes(id: &str) -> Option<[u8; 16]> {
    protocol::unhex(id)?.try_into().ok()
}

fn discard_unclaimed_files(session: &Session) {
    for rx in session.lock().received.iter_mut().filter_map(Option::take) {
        transfer::discard(&rx);
    }
}

fn elapsed_ns(first: Option<Instant>, last: Option<Instant>) -> u64 {
    match (first, last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f).as_nanos() as u64,
        _ => 0,
    }
}

/// Echo `size`-byte messages until the client closes.
fn echo(
    mut stream: &TcpStream,
    size: usize,
    closed: &AtomicBool,
) -> Result<StreamReport, RoleError> {
    let mut buf = vec![0u8; size.min(MAX_SERVER_BUFFER)];
    let mut report = StreamReport::default();
    let (mut first, mut last) = (None, None);
    loop {
        let mut got = 0;
        while got < buf.len() {
            match stream.read(&mut buf[got..]) {
                Ok(0) if got == 0 => {
                    report.elapsed_ns = elapsed_ns(first, last);
                    return Ok(report);
                }
                Ok(0) => return Err(RoleError::ClosedMidMessage),
                Ok(n) => {
                    got += n;
                    report.reads += 1;
                    first.get_or_insert_with(Instant::now);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(crate::stream_error::read_error(e, closed)),
            }
        }
        stream
            .write_all(&buf)
            .map_err(|e| RoleError::io("echo write", e))?;
        report.bytes += buf.len() as u64;
        last = Some(Instant::now());
    }
}

fn ack_stall_receiver(
    stream: &TcpStream,
    quickack: bool,
    session: &Session,
) -> Result<StreamReport, RoleError> {
    let mode = if quickack {
        crate::ack_stall::AckMode::QuickAck
    } else {
        crate::ack_stall::AckMode::Delayed
    };
    let rx = crate::ack_stall::receive(stream, mode, session.deadline, &session.closed)
        .map_err(|e| RoleError::io("receiving", e))?;
    let elapsed = match (rx.first_byte, rx.last_byte) {
        (Some(f), Some(l)) => l.saturating_sub(f).as_nanos() as u64,
        _ => 0,
    };
    Ok(StreamReport {
        bytes: rx.bytes,
        reads: rx.reads,
        elapsed_ns: elapsed,
        ..StreamReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server skips its error reply to a client that closed the
    /// connection, decided by the frame error's kind, not by its words.
    #[test]
    fn a_client_that_closed_is_not_told_why() {
        let gone = |e| Refusal::reading_finish(e).2;
        assert_eq!(gone(FrameError::Closed), PeerGone(true));
        assert_eq!(gone(FrameError::Truncated), PeerGone(true));
        assert_eq!(gone(FrameError::TimedOut), PeerGone(false));
        // Peer text that says "closed" does not count.
        let malformed = FrameError::Malformed("connection closed".into());
        assert_eq!(gone(malformed), PeerGone(false));
        let Refusal(code, message, _) = Refusal::reading_finish(FrameError::Closed);
        assert_eq!(code, ErrorCode::Protocol);
        assert_eq!(
            message,
            "client closed the control connection before finishing"
        );
    }
}
