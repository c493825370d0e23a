//! `rfs serve`: the sockets around [`crate::service`].
//!
//! UDP: a few worker threads, each blocking on a socket of its own, all
//! bound to one address with SO_REUSEPORT ([`crate::udp_group`]: the
//! kernel hashes each client's address to one of them; where the group is
//! refused, every worker shares one socket). A worker takes the datagrams
//! queued on its socket with one call, and sends the replies to their
//! sources from that socket with another ([`crate::udp_worker`]: a read's
//! data gathered from the file's mapped pages). A client's requests reach
//! one worker (or, on a shared socket, several at once, answered out of
//! order); the client matches replies by request id either way. A
//! retransmission that arrives while the original is still running is
//! dropped by the duplicate-request cache.
//!
//! Trap: a request runs to its end on the worker that took it, so a slow
//! one (an fsync) holds that worker and the clients hashed to it; with the
//! default of min(4, CPUs) workers, the other clients go on, and the
//! client sends such requests "patient" (long retransmission timeout). The
//! slowest, Hash, goes to hasher threads of its own ([`crate::hasher`]).
//!
//! TCP: one thread per connection. Connections that have not opened a
//! session yet wait in a pool of their own, bounded in all and per source
//! address, where a newcomer makes room by closing the oldest
//! ([`crate::pending`]), so trickling and silent peers cannot take the
//! places of clients. A connection beyond `max_clients` sessions gets BUSY
//! in answer to its hello; one beyond `max_clients + 4 + max_pending`
//! connections (only while evicted ones are still closing) is answered at
//! once with BUSY under request id 0 (which answers no request: the
//! server's word on the connection) and closed, so its client can say
//! "server busy" instead of "connection reset". A connection must open an
//! authenticated session within `hello_timeout` of its accept, however it
//! trickles its bytes, or it is closed. Until then its frames may not
//! announce more than
//! [`HELLO_LEN`](protocol::HELLO_LEN) bytes. Each
//! message is framed by a 4-byte big-endian length that is checked against
//! [`MAX_MESSAGE`] before anything else. Requests on a connection are
//! handled in order; the client's window keeps the connection busy. The
//! data of a read of 16 KiB or more follows its reply's header straight
//! from the file (sendfile, [`crate::sendfile`]): no copy on the server. A
//! connection that sends a frame the server cannot parse, goes silent for
//! `session_idle`, or closes in the middle of a frame is closed, and its
//! session ends; a partly received request is never executed.
//!
//! Memory: per client, the duplicate-request cache (bounded by
//! `max_client_memory` less the connection buffers) and, for TCP, an input
//! buffer of two frames and an output buffer of two. Each UDP worker has a
//! batch of datagram buffers (1 MiB) and a few mapped file windows
//! ([`crate::mapped`]: address space, not memory). So the server's memory is bounded by
//! `(max_clients + 4) x max_client_memory` plus the handle table and the
//! pending pool's buffers (of which a peer without a session fills at most
//! a hello), whatever the
//! clients send.
//!
//! Every socket operation has a timeout so that `serve` notices `stop`
//! within a fraction of a second.
//!
//! Trap (UDP on a host with several addresses): replies leave from the
//! address the kernel picks for the route back, and a client whose socket
//! is connected to another of the server's addresses drops them (the old
//! NFS-over-UDP problem). Bind the server to the address clients use.

use crate::drc;
use crate::export::Resolver;
use crate::pending::Pending;
use crate::protocol::framing::FrameBuffer;
use crate::protocol::{self, ErrorCode, Op, RemoteError, Transport, MAX_MESSAGE};
use crate::service::{EventSink, FileBody, Outcome, Peer, ServerStats, Service, ServiceConfig};
use crate::udp_group::{SocketSetup, UdpSockets};
use crate::{sendfile, sock};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::service::ServerEvent;

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Socket buffer the server asks for (UDP): a window of 64 x 64 KiB.
const UDP_BUFFER: usize = 8 << 20;
/// How long a TCP reply may take to be written before the client is
/// considered gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted beyond `max_clients` only to be closed.
const EXTRA_CONNECTIONS: usize = 4;
/// TCP: replies to the requests already buffered are gathered up to this
/// many bytes and written with one system call (a window of small
/// requests arrives in one read; answering each with its own write cost
/// a send and a segment apiece).
const OUT_BUFFER: usize = 2 * (MAX_MESSAGE + 4);
/// What a TCP connection's buffers take: input of two frames, output of
/// [`OUT_BUFFER`].
pub const CONNECTION_BUFFERS: usize = 2 * (MAX_MESSAGE + 4) + OUT_BUFFER;
/// Duplicate-cache entries a client gets at least.
pub const MIN_DRC_ENTRIES: usize = 64;
/// The smallest per-client memory bound.
pub const MIN_CLIENT_MEMORY: usize = CONNECTION_BUFFERS + MIN_DRC_ENTRIES * drc::ENTRY_COST;

/// Default bound of a file's size through writes (and of a Hash): 64 GiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 << 30;

/// Which transports to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transports {
    pub udp: bool,
    pub tcp: bool,
}

impl Transports {
    pub const UDP: Transports = Transports {
        udp: true,
        tcp: false,
    };
    pub const TCP: Transports = Transports {
        udp: false,
        tcp: true,
    };
    pub const BOTH: Transports = Transports {
        udp: true,
        tcp: true,
    };
}

/// Limits and settings of a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Refuse every change (create, write, remove) with ROFS.
    pub read_only: bool,
    /// Clients must prove they know this token (it never crosses the wire;
    /// see [`crate::auth`]).
    pub token: Option<String>,
    /// Sessions (clients) at once.
    pub max_clients: usize,
    /// Memory one client may hold on the server: its duplicate-request
    /// cache and, over TCP, its connection buffers.
    pub max_client_memory: usize,
    /// UDP worker threads; 0 picks min(4, CPUs).
    pub udp_workers: usize,
    /// A client silent this long is forgotten (UDP) or disconnected (TCP).
    pub session_idle: Duration,
    /// TCP: the time from accept to an authenticated session.
    pub hello_timeout: Duration,
    /// TCP: connections without a session yet, in all (beside the
    /// sessions' own slots; see [`crate::pending`]); with a token, also
    /// the sessions (UDP and TCP) that have not proved it yet.
    pub max_pending: usize,
    /// TCP: connections without a session yet from one source address
    /// (IPv6: one /64); with a token, also the sessions per source that
    /// have not proved it yet.
    pub max_pending_per_source: usize,
    /// Writes may not reach beyond this many bytes of a file (so one write
    /// at a large offset cannot create a huge sparse file).
    pub max_file_size: u64,
    /// Largest file a Hash reads.
    pub max_hash_bytes: u64,
    /// Longest a Hash may take.
    pub hash_timeout: Duration,
    /// How paths are resolved beneath the export; None picks openat2 where
    /// the kernel has it.
    pub resolver: Option<Resolver>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            read_only: false,
            token: None,
            max_clients: 16,
            max_client_memory: 1 << 20,
            udp_workers: 0,
            session_idle: Duration::from_secs(120),
            hello_timeout: Duration::from_secs(5),
            max_pending: 256,
            max_pending_per_source: 64,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            max_hash_bytes: DEFAULT_MAX_FILE_SIZE,
            hash_timeout: Duration::from_secs(120),
            resolver: None,
        }
    }
}

/// Why a server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{what} {value} is not accepted ({accepted})")]
    Option {
        what: &'static str,
        value: String,
        accepted: String,
    },
    #[error("cannot export {}: {source}", path.display())]
    Export {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind {transport} on {addr}: {source}")]
    Bind {
        transport: Transport,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

/// A bound server, ready to [`serve`](Server::serve).
pub struct Server {
    tcp: Option<TcpListener>,
    /// One socket per UDP worker (or one shared by them all).
    udp: Option<UdpSockets>,
    addr: SocketAddr,
    service: Arc<Service>,
    udp_workers: usize,
    session_idle: Duration,
    hello_timeout: Duration,
    max_clients: usize,
    connections: AtomicUsize,
    next_conn: AtomicU64,
    /// TCP connections without a ready session yet.
    pending: Pending,
    max_pending: usize,
}

impl Server {
    /// Bind `addr` (port 0 picks a free port, the same for UDP and TCP)
    /// and open `export` for serving.
    pub fn bind(
        addr: SocketAddr,
        transports: Transports,
        export: &Path,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        Server::bind_with_events(addr, transports, export, options, None)
    }

    /// [`bind`](Server::bind), with a sink for [`ServerEvent`]s.
    pub fn bind_with_events(
        addr: SocketAddr,
        transports: Transports,
        export: &Path,
        options: ServerOptions,
        events: Option<EventSink>,
    ) -> Result<Server, ServerError> {
        validate(&transports, &options)?;
        let drc_budget = options.max_client_memory - CONNECTION_BUFFERS;
        let service = Service::new(
            export,
            ServiceConfig {
                read_only: options.read_only,
                token: options.token.clone(),
                max_clients: options.max_clients,
                max_unauthenticated: options.max_pending,
                max_unauthenticated_per_source: options.max_pending_per_source,
                drc_budget,
                session_idle: options.session_idle,
                resolver: options.resolver,
                max_file_size: options.max_file_size,
                hash: crate::hasher::Limits {
                    max_bytes: options.max_hash_bytes,
                    timeout: options.hash_timeout,
                },
            },
            events,
        )
        .map_err(|source| ServerError::Export {
            path: export.to_path_buf(),
            source,
        })?;
        let workers = match options.udp_workers {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get().min(4)),
            n => n,
        };
        let (tcp, udp, addr) = bind_sockets(addr, transports, workers)?;
        if udp.is_some() {
            service.offload_hashes();
        }
        if options.token.is_none() {
            service.serve_own_user_only(addr.port());
        }
        Ok(Server {
            tcp,
            udp,
            addr,
            service: Arc::new(service),
            udp_workers: workers,
            session_idle: options.session_idle,
            hello_timeout: options.hello_timeout,
            max_clients: options.max_clients,
            connections: AtomicUsize::new(0),
            next_conn: AtomicU64::new(1),
            pending: Pending::new(options.max_pending, options.max_pending_per_source),
            max_pending: options.max_pending,
        })
    }

    /// The bound address (UDP and TCP share the port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The exported directory.
    pub fn export(&self) -> &Path {
        self.service.export_path()
    }

    /// How paths are resolved beneath the export.
    pub fn resolver(&self) -> Resolver {
        self.service.resolver()
    }

    pub fn stats(&self) -> ServerStats {
        self.service.stats()
    }

    /// Why the UDP workers share one socket, when the kernel refused them
    /// a socket each (SO_REUSEPORT); `None` when each has its own, or one
    /// worker, or no UDP.
    pub fn udp_note(&self) -> Option<&str> {
        self.udp.as_ref().and_then(|u| u.note())
    }

    /// UDP sockets the workers serve: one each, or 1 when shared.
    pub fn udp_sockets(&self) -> usize {
        self.udp.as_ref().map_or(0, |u| u.len())
    }

    /// Serve until `stop` is set; returns after every thread ended (within
    /// a fraction of a second of `stop`).
    pub fn serve(&self, stop: &AtomicBool) -> Result<(), ServerError> {
        std::thread::scope(|scope| {
            if let Some(udp) = &self.udp {
                for i in 0..self.udp_workers {
                    let socket = udp.for_worker(i);
                    scope.spawn(move || self.udp_worker(socket, stop));
                }
                for _ in 0..crate::hasher::HASHERS {
                    // Any socket of the group sends from the same address.
                    let socket = udp.first();
                    scope.spawn(move || self.hasher(socket, stop));
                }
            }
            let accept = self
                .tcp
                .as_ref()
                .map(|listener| scope.spawn(move || self.accept_loop(scope, listener, stop)));
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
                if last.elapsed() > Duration::from_secs(1) {
                    self.service.expire_sessions();
                    last = Instant::now();
                }
            }
            match accept.map(|h| h.join()) {
                Some(Ok(result)) => result,
                Some(Err(_)) => Err(ServerError::Io {
                    context: "the TCP accept thread failed".into(),
                    source: io::Error::other("thread panicked"),
                }),
                None => Ok(()),
            }
        })
    }

    fn udp_worker(&self, udp: &UdpSocket, stop: &AtomicBool) {
        crate::udp_worker::serve(&self.service, udp, stop);
    }

    /// Run queued UDP hashes and send their replies.
    fn hasher(&self, udp: &UdpSocket, stop: &AtomicBool) {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(job) = self.service.hashes.next(POLL) {
                out.clear();
                self.service.run_hash_job(&job, &mut out);
                let _ = udp.send_to(&out, job.to);
            }
        }
    }

    fn accept_loop<'scope>(
        &'scope self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        listener: &'scope TcpListener,
        stop: &'scope AtomicBool,
    ) -> Result<(), ServerError> {
        while !stop.load(Ordering::SeqCst) {
            if !sock::wait_readable(listener.as_raw_fd(), POLL) {
                continue;
            }
            let (stream, peer) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if is_transient_accept_error(&e) => continue,
                Err(source) => {
                    return Err(ServerError::Io {
                        context: format!("accepting TCP connections on {}", self.addr),
                        source,
                    })
                }
            };
            let open = self.connections.fetch_add(1, Ordering::SeqCst) + 1;
            let slot = ConnectionSlot(&self.connections);
            if open > self.max_connections() && !self.pending.evict_oldest() {
                self.turn_away(stream);
                drop(slot);
                continue;
            }
            let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
            let (evicted, _) = self.pending.admit(conn, peer.ip(), &stream);
            let spawned = std::thread::Builder::new()
                .name("rfs-conn".into())
                .stack_size(256 * 1024)
                .spawn_scoped(scope, move || {
                    let _slot = slot;
                    self.serve_connection(stream, peer, conn, &evicted, stop);
                    self.pending.remove(conn);
                    self.service.end_connection(conn);
                });
            if spawned.is_err() {
                // Out of threads: the connection is dropped with the closure.
                self.pending.remove(conn);
                continue;
            }
        }
        Ok(())
    }

    /// Connections at once: the sessions', a few more, and the pending pool.
    fn max_connections(&self) -> usize {
        self.max_clients + EXTRA_CONNECTIONS + self.max_pending
    }

    /// Answer a connection beyond the limit with BUSY under request id 0,
    /// without blocking the accept loop, and close it.
    fn turn_away(&self, mut stream: TcpStream) {
        let _ = stream.set_nonblocking(true);
        let busy = RemoteError::new(
            ErrorCode::Busy,
            format!(
                "server busy: it has {} connections open, its most; try again later",
                self.max_connections()
            ),
        );
        let mut out = vec![0u8; 4];
        protocol::encode_error_reply(0, 0, Op::Hello.code(), &busy, &mut out);
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        // A fresh socket's send buffer takes these few bytes at once.
        let _ = stream.write(&out);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        // Read what already arrived, so that the close sends FIN and not
        // RST (which could discard the reply before the client reads it).
        let mut sink = [0u8; 4096];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    }

    fn serve_connection(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        conn: u64,
        evicted: &AtomicBool,
        stop: &AtomicBool,
    ) {
        let Some(mut c) = TcpConnection::open(stream, Peer::Tcp { conn, addr }, conn) else {
            return;
        };
        while !stop.load(Ordering::Relaxed) {
            if !self.still_admitted(&mut c, evicted) {
                return;
            }
            match self.receive(&mut c) {
                Received::Bytes => {}
                Received::Nothing => continue,
                Received::Closed => return,
            }
            if !self.answer_received(&mut c) {
                return;
            }
        }
    }

    /// Whether a connection whose session is not ready yet may go on: a
    /// total deadline, checked whatever arrives (trickling bytes does not
    /// extend it), and not evicted from the pending pool.
    fn still_admitted(&self, c: &mut TcpConnection, evicted: &AtomicBool) -> bool {
        if c.ready {
            return true;
        }
        c.ready = self.service.connection_ready(c.conn);
        if c.ready {
            self.pending.remove(c.conn);
            return true;
        }
        c.accepted.elapsed() <= self.hello_timeout && !evicted.load(Ordering::Relaxed)
    }

    /// Read what arrived into the frame buffer.
    fn receive(&self, c: &mut TcpConnection) -> Received {
        match c.frames.fill(&mut c.stream) {
            Ok(0) => Received::Closed, // maybe mid-frame: that request is dropped
            Ok(_) => Received::Bytes,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if c.last_frame.elapsed() > self.session_idle {
                    Received::Closed
                } else {
                    Received::Nothing
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Received::Nothing,
            Err(_) => Received::Closed,
        }
    }

    /// Answer the whole requests received and write the replies. False when
    /// the connection is to be closed.
    fn answer_received(&self, c: &mut TcpConnection) -> bool {
        // Before its session is ready a connection may send only a hello
        // and an auth, both small: a peer that announces a larger frame
        // is not one of ours.
        if !c.ready
            && c.frames
                .front_len()
                .is_some_and(|n| n > protocol::HELLO_LEN)
            && !self.service.connection_ready(c.conn)
        {
            return false;
        }
        // Answer every whole request buffered, gathering the replies;
        // write them when the next might not fit, and when no whole
        // request is left (never hold a reply while waiting for input).
        c.out.clear();
        if !self.answer_buffered(
            c.peer,
            &mut c.stream,
            &mut c.frames,
            &mut c.out,
            &mut c.last_frame,
        ) {
            return false;
        }
        // Leave the pending pool before the hello's answer goes out:
        // once the client has it, it may open more connections, and a
        // pool filling then must not evict this one, by now a session.
        if !c.ready && self.service.connection_ready(c.conn) {
            c.ready = true;
            self.pending.remove(c.conn);
        }
        if !c.out.is_empty() && c.stream.write_all(&c.out).is_err() {
            return false;
        }
        !c.frames.has_bad_frame()
    }

    /// Answer every whole request buffered, gathering the replies in `out`:
    /// written when the next might not fit, and before a reply whose data
    /// follows from the file; the rest is the caller's to write. False when
    /// the connection is to be closed.
    fn answer_buffered(
        &self,
        peer: Peer,
        stream: &mut TcpStream,
        frames: &mut FrameBuffer,
        out: &mut Vec<u8>,
        last_frame: &mut Instant,
    ) -> bool {
        loop {
            let frame = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(()) => break, // a length we cannot trust: close below
            };
            *last_frame = Instant::now();
            if out.len() + MAX_MESSAGE + 4 > OUT_BUFFER {
                if stream.write_all(out).is_err() {
                    return false;
                }
                out.clear();
            }
            let at = out.len();
            out.extend_from_slice(&[0u8; 4]);
            let mut body = None;
            let outcome =
                self.service
                    .handle_deferring(peer, Transport::Tcp, frame, out, Some(&mut body));
            match outcome {
                Outcome::Reply => {
                    let deferred = body.as_ref().map_or(0, |b: &FileBody| b.len);
                    let len = (out.len() - at - 4 + deferred) as u32;
                    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
                    if let Some(b) = body {
                        // The replies gathered so far, this header last,
                        // then its data from the file.
                        if sendfile::send_more(stream, out).is_err()
                            || sendfile::send_file(stream, &b.file, b.offset, b.len).is_err()
                        {
                            return false;
                        }
                        out.clear();
                    }
                }
                Outcome::Drop => out.truncate(at),
                Outcome::Close => {
                    // The replies before it still go out.
                    out.truncate(at);
                    let _ = stream.write_all(out);
                    return false;
                }
            }
            frames.consume();
        }
        true
    }
}

fn validate(transports: &Transports, options: &ServerOptions) -> Result<(), ServerError> {
    if !transports.udp && !transports.tcp {
        return Err(ServerError::Option {
            what: "transports",
            value: "none".into(),
            accepted: "UDP, TCP or both".into(),
        });
    }
    if options.max_clients == 0 || options.max_clients > 4096 {
        return Err(ServerError::Option {
            what: "max_clients",
            value: options.max_clients.to_string(),
            accepted: "1..=4096".into(),
        });
    }
    if options.max_client_memory < MIN_CLIENT_MEMORY {
        return Err(ServerError::Option {
            what: "max_client_memory",
            value: options.max_client_memory.to_string(),
            accepted: format!(
                "at least {MIN_CLIENT_MEMORY} bytes: TCP buffers of {CONNECTION_BUFFERS} bytes and {MIN_DRC_ENTRIES} cached replies"
            ),
        });
    }
    if options.udp_workers > 64 {
        return Err(ServerError::Option {
            what: "udp_workers",
            value: options.udp_workers.to_string(),
            accepted: "0 (automatic) ..= 64".into(),
        });
    }
    if options.token.as_ref().is_some_and(|t| t.is_empty()) {
        return Err(ServerError::Option {
            what: "token",
            value: "\"\"".into(),
            accepted: "a non-empty secret, or no token".into(),
        });
    }
    if options.hash_timeout.is_zero() {
        return Err(ServerError::Option {
            what: "hash_timeout",
            value: "0".into(),
            accepted: "a positive duration".into(),
        });
    }
    if options.max_pending == 0 || options.max_pending > 65536 {
        return Err(ServerError::Option {
            what: "max_pending",
            value: options.max_pending.to_string(),
            accepted: "1..=65536".into(),
        });
    }
    if options.max_pending_per_source == 0 || options.max_pending_per_source > options.max_pending {
        return Err(ServerError::Option {
            what: "max_pending_per_source",
            value: options.max_pending_per_source.to_string(),
            accepted: format!("1..=max_pending ({})", options.max_pending),
        });
    }
    if options.hello_timeout.is_zero() {
        return Err(ServerError::Option {
            what: "hello_timeout",
            value: "0".into(),
            accepted: "a positive duration".into(),
        });
    }
    if options.session_idle.is_zero() {
        return Err(ServerError::Option {
            what: "session_idle",
            value: "0".into(),
            accepted: "a positive duration".into(),
        });
    }
    Ok(())
}

#[allow(clippy::type_complexity)]
fn bind_sockets(
    addr: SocketAddr,
    transports: Transports,
    udp_workers: usize,
) -> Result<(Option<TcpListener>, Option<UdpSockets>, SocketAddr), ServerError> {
    let bind_err = |transport, addr, source| ServerError::Bind {
        transport,
        addr,
        source,
    };
    // With port 0 and both transports, the port the kernel picks for TCP
    // may be taken for UDP: try a few times.
    let mut tries = 0;
    loop {
        tries += 1;
        let tcp = if transports.tcp {
            Some(TcpListener::bind(addr).map_err(|e| bind_err(Transport::Tcp, addr, e))?)
        } else {
            None
        };
        let udp_addr = match &tcp {
            Some(l) => l
                .local_addr()
                .map_err(|e| bind_err(Transport::Tcp, addr, e))?,
            None => addr,
        };
        let setup = SocketSetup {
            read_timeout: POLL,
            buffer: UDP_BUFFER,
        };
        let udp = if transports.udp {
            match UdpSockets::bind(udp_addr, udp_workers, setup) {
                Ok(s) => Some(s),
                Err(e) if addr.port() == 0 && tcp.is_some() && tries < 8 => {
                    let _ = e;
                    continue;
                }
                Err(e) => return Err(bind_err(Transport::Udp, udp_addr, e)),
            }
        } else {
            None
        };
        let local = match (&tcp, &udp) {
            (Some(l), _) => l.local_addr(),
            (None, Some(u)) => u.local_addr(),
            (None, None) => unreachable!("validate() requires a transport"),
        }
        .map_err(|e| bind_err(Transport::Tcp, addr, e))?;
        if let Some(l) = &tcp {
            l.set_nonblocking(true)
                .map_err(|e| bind_err(Transport::Tcp, local, e))?;
        }
        return Ok((tcp, udp, local));
    }
}

/// One TCP connection's state between the steps of serving it.
struct TcpConnection {
    stream: TcpStream,
    peer: Peer,
    conn: u64,
    frames: FrameBuffer,
    out: Vec<u8>,
    /// When the last whole request arrived: the idle limit counts from it.
    last_frame: Instant,
    accepted: Instant,
    /// The connection's session is ready (its hello, and auth if needed,
    /// are done): it left the pending pool.
    ready: bool,
}

impl TcpConnection {
    /// Blocking, no Nagle, and the read and write timeouts the loop relies
    /// on; `None` when the socket refuses them.
    fn open(stream: TcpStream, peer: Peer, conn: u64) -> Option<TcpConnection> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        if stream.set_read_timeout(Some(POLL)).is_err()
            || stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err()
        {
            return None;
        }
        let now = Instant::now();
        Some(TcpConnection {
            stream,
            peer,
            conn,
            frames: FrameBuffer::new(),
            out: Vec::with_capacity(OUT_BUFFER),
            last_frame: now,
            accepted: now,
            ready: false,
        })
    }
}

/// What one read from a connection brought.
enum Received {
    Bytes,
    /// Nothing yet (timeout or signal): go round again.
    Nothing,
    /// The peer closed, the read failed or the connection was idle too long.
    Closed,
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

/// Counts a connection while it lives.
struct ConnectionSlot<'a>(&'a AtomicUsize);

impl Drop for ConnectionSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let bad = [
            ServerOptions {
                max_clients: 0,
                ..Default::default()
            },
            ServerOptions {
                max_client_memory: 1000,
                ..Default::default()
            },
            ServerOptions {
                token: Some(String::new()),
                ..Default::default()
            },
        ];
        for options in bad {
            let e = Server::bind(addr, Transports::BOTH, dir.path(), options)
                .err()
                .unwrap();
            assert!(matches!(e, ServerError::Option { .. }), "{e}");
        }
        let e = Server::bind(
            addr,
            Transports {
                udp: false,
                tcp: false,
            },
            dir.path(),
            ServerOptions::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("UDP, TCP or both"), "{e}");
        let e = Server::bind(
            addr,
            Transports::BOTH,
            &dir.path().join("missing"),
            ServerOptions::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    /// A UDP port held by another socket, one that allows sharing
    /// (SO_REUSEPORT, as a second server of this kind holds it) or not, is
    /// refused with the usual error naming the transport and address.
    #[test]
    fn a_udp_port_already_taken_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let sharing = crate::udp_group::bind_reusing("127.0.0.1:0".parse().unwrap()).unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        for taken in [&sharing, &plain] {
            let addr = taken.local_addr().unwrap();
            let options = ServerOptions {
                udp_workers: 2,
                ..Default::default()
            };
            let e = Server::bind(addr, Transports::UDP, dir.path(), options)
                .err()
                .unwrap();
            let text = e.to_string();
            assert!(
                matches!(e, ServerError::Bind { .. }) && text.contains(&format!("UDP on {addr}")),
                "{text}"
            );
        }
    }
}
