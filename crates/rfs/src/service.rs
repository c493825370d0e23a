//! The request handler, apart from sockets: one message in, at most one
//! message out. The UDP workers and TCP connections of [`crate::server`]
//! call [`Service::handle`]; tests call it directly.
//!
//! Order of checks for every message, so that nothing a peer sends is
//! acted on before it is understood and allowed:
//!
//! 1. The header decodes (size, magic, reserved bytes). Otherwise the
//!    message is dropped (UDP) or the connection closed (TCP): there is no
//!    request id to answer.
//! 2. Version and operation code are known, the body decodes strictly.
//!    Otherwise an error reply (PROTOCOL, UNSUPPORTED, INVAL) names the
//!    problem.
//! 3. `Hello` opens a session (bounded by `max_clients`), over UDP only
//!    with a valid address cookie (otherwise it is answered `Retry` and
//!    nothing is kept; [`crate::cookie`]), and not for an address backed
//!    off after wrong tokens ([`crate::backoff`]). Everything else names a
//!    session that exists, belongs to the sender's address (UDP) or
//!    connection (TCP), and has authenticated when the server has a token.
//!    Only a request that passed that check confirms the session (an
//!    unconfirmed session can be evicted for a new client).
//! 4. Non-idempotent operations pass the session's duplicate-request cache
//!    ([`crate::drc`]).
//! 5. The operation runs against the export (module `export`), with
//!    handles from module `handles`; every error becomes a code and a
//!    detail naming the input.
//!
//! Over UDP, a reply to a sender that has no session is never larger than
//! its request (an error's detail is cut, or nothing is sent): a forged
//! source address cannot turn the server into an amplifier.

mod admission;
mod put;

use crate::auth;
use crate::cookie::{self, CookieJar};
use crate::drc::{self, Check, Drc};
use crate::export::{self, Export, RelPath, Resolver};
use crate::handles::{FdCache, HandleTable, Resolved};
use crate::hasher;
use crate::protocol::{
    self, begin_read_reply, decode_header, decode_request_body, encode_error_reply,
    encode_error_reply_as, encode_reply, finish_read_reply, finish_read_reply_header, io_error,
    printable, request_op, Attr, CreateHow, DecodeError, DirEntry, ErrorCode, Handle, Header, Kind,
    Op, RemoteError, Reply, Request, Transport, REPLY_BIT,
};
use osprobe_core::backoff::Backoff;
use osprobe_core::local_user;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Most handles the server remembers.
pub const MAX_HANDLES: usize = 16_384;
/// Most path bytes the handle table holds.
pub const MAX_HANDLE_PATH_BYTES: usize = 8 << 20;
/// Open files kept between requests.
const FD_CACHE: usize = 64;
/// How long an open file is reused before its path is checked again.
const FD_TTL: Duration = Duration::from_secs(1);
/// How long a session may stay unauthenticated, or unconfirmed (nothing
/// after its hello).
const AUTH_GRACE: Duration = Duration::from_secs(5);
/// An unconfirmed session older than this is evicted when a new client
/// needs its slot.
const UNCONFIRMED_GRACE: Duration = Duration::from_secs(1);

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    Udp(SocketAddr),
    /// A TCP connection: its number on this server and the peer's address.
    Tcp {
        conn: u64,
        addr: SocketAddr,
    },
}

impl Peer {
    pub fn addr(&self) -> SocketAddr {
        match self {
            Peer::Udp(a) | Peer::Tcp { addr: a, .. } => *a,
        }
    }
}

/// What the transport does after [`Service::handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Send what was appended to `out`.
    Reply,
    /// Send nothing.
    Drop,
    /// Send nothing and close the connection (TCP): the stream is no
    /// longer framed in a way we can trust.
    Close,
}

/// Read data a TCP reply still owes after its header: `len` bytes of
/// `file` from `offset`, which the server sends straight from the file
/// (sendfile), never copying them through user space. The header in `out`
/// already counts them in its lengths.
#[derive(Debug)]
pub(crate) struct FileBody {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: usize,
}

/// Reads at least this large are answered with a [`FileBody`] when the
/// caller takes one: below it, a header send and a sendfile cost more
/// than the copy they save (a 4 KiB page is copied faster than a second
/// system call is made).
pub(crate) const FILE_BODY_MIN: usize = 16 << 10;

/// Something a server operator may want to see; the library never prints.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    SessionOpened {
        peer: SocketAddr,
        transport: Transport,
        session: u64,
    },
    SessionEnded {
        peer: SocketAddr,
        session: u64,
        reason: &'static str,
    },
    Refused {
        peer: SocketAddr,
        reason: String,
    },
}

impl fmt::Display for ServerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerEvent::SessionOpened {
                peer,
                transport,
                session,
            } => write!(f, "{peer}: session {session:016x} opened over {transport}"),
            ServerEvent::SessionEnded {
                peer,
                session,
                reason,
            } => write!(f, "{peer}: session {session:016x} ended ({reason})"),
            ServerEvent::Refused { peer, reason } => write!(f, "{peer}: refused: {reason}"),
        }
    }
}

/// Where events go.
pub type EventSink = Arc<dyn Fn(&ServerEvent) + Send + Sync>;

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub replies: AtomicU64,
    /// Retransmissions answered from the duplicate-request cache.
    pub replayed: AtomicU64,
    /// Duplicates dropped while the original was still running.
    pub dropped_in_progress: AtomicU64,
    /// Messages that did not decode.
    pub malformed: AtomicU64,
    /// Requests refused for session, token or load reasons.
    pub refused: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub sessions_opened: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of the server's [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub requests: u64,
    pub replies: u64,
    pub replayed: u64,
    pub dropped_in_progress: u64,
    pub malformed: u64,
    pub refused: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub sessions_opened: u64,
    pub sessions_open: u64,
}

/// Settings the service needs (a subset of the server's options).
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub read_only: bool,
    pub token: Option<String>,
    /// Sessions that may make requests (authenticated, or no token needed).
    pub max_clients: usize,
    /// Sessions that have not proved the token yet, in all (beside
    /// `max_clients`; see [`admission`]).
    pub max_unauthenticated: usize,
    /// Sessions that have not proved the token yet, per source address.
    pub max_unauthenticated_per_source: usize,
    /// Bytes of duplicate-request cache per session.
    pub drc_budget: usize,
    /// A UDP session silent this long is forgotten.
    pub session_idle: Duration,
    pub resolver: Option<Resolver>,
    /// Writes may not reach beyond this many bytes of a file.
    pub max_file_size: u64,
    /// Bounds of one Hash.
    pub hash: hasher::Limits,
}

struct Session {
    id: u64,
    peer: Peer,
    transport: Transport,
    client_nonce: [u8; 16],
    server_nonce: [u8; 32],
    authenticated: AtomicBool,
    /// The client sent something after its hello: its address is real
    /// (a hello from a forged address never gets a second request).
    confirmed: AtomicBool,
    /// Milliseconds since the service started.
    last_seen: AtomicU64,
    created: Instant,
    drc: Mutex<Drc>,
    /// Uploads in progress: their temporary files go when the session does.
    uploads: Mutex<put::SessionUploads>,
}

/// The file service of one export.
pub struct Service {
    export: Export,
    config: ServiceConfig,
    started: Instant,
    handles: Mutex<HandleTable>,
    fds: Mutex<FdCache>,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    /// Every upload in progress, by handle index (held by their sessions).
    uploads: Mutex<HashMap<u64, Weak<put::Upload>>>,
    /// Directories already swept of dead servers' uploads (by identity).
    swept_dirs: Mutex<std::collections::HashSet<(u64, u64)>>,
    pub counters: Counters,
    events: Option<EventSink>,
    /// Validates UDP source addresses before a session exists.
    cookies: CookieJar,
    /// Addresses that sent wrong tokens wait before their next session.
    backoff: Backoff,
    /// UDP hashes waiting for the server's hasher threads.
    pub(crate) hashes: hasher::Queue,
    /// Whether UDP hashes go to `hashes` (a server with hasher threads) or
    /// run where they arrive.
    offload_hashes: AtomicBool,
    /// Without a token: the port whose peers must be this process's user
    /// or root ([`osprobe_core::local_user`]); unset in tests of the
    /// service alone, whose peers are not real sockets.
    own_users_on: std::sync::OnceLock<u16>,
    /// Hashes running on TCP connections' threads now.
    tcp_hashes: std::sync::atomic::AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type OpResult<T> = Result<T, RemoteError>;

/// A random session id no session has.
fn fresh_session_id(sessions: &HashMap<u64, Arc<Session>>) -> OpResult<u64> {
    loop {
        let id = auth::random_nonzero_u64().map_err(|e| io_error(&e, "random session id"))?;
        if !sessions.contains_key(&id) {
            return Ok(id);
        }
    }
}

/// Answer the request of `header` with the error `e`.
fn reply_error(header: &Header, e: RemoteError, out: &mut Vec<u8>) -> Outcome {
    encode_error_reply(header.session, header.xid, header.opcode, &e, out);
    Outcome::Reply
}

fn err(code: ErrorCode, detail: impl Into<String>) -> RemoteError {
    RemoteError::new(code, detail)
}

fn quoted(name: &[u8]) -> String {
    format!("\"{}\"", printable(name, 64))
}

fn show_path(p: &RelPath) -> String {
    if p.is_root() {
        "the export's root".to_string()
    } else {
        quoted(p.as_bytes())
    }
}

/// Like [`io_error`] for a path reached through a handle: if it is gone,
/// the handle is stale.
fn handle_io_error(e: &io::Error, what: &str) -> RemoteError {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => err(
            ErrorCode::Stale,
            format!("{what} no longer exists (removed or renamed); look it up again"),
        ),
        _ => io_error(e, what),
    }
}

/// Refuse to write a file with more than one name: a hard link inside the
/// export may name a file outside it, which must not change through rfs.
fn refuse_hard_links(st: &libc::stat, what: &str) -> OpResult<()> {
    if st.st_nlink > 1 {
        return Err(err(
            ErrorCode::Access,
            format!(
                "{what} has {} hard links; rfs does not write through a hard link (another name, maybe outside the export, would change too)",
                st.st_nlink
            ),
        ));
    }
    Ok(())
}

/// The upload handle a request names, if any (only its session may use it).
fn upload_of<'r>(req: &'r Request<'_>) -> Option<&'r Handle> {
    match req {
        Request::Read { file: h, .. }
        | Request::Write { file: h, .. }
        | Request::Hash { file: h }
        | Request::Commit { file: h }
        | Request::Getattr { handle: h }
        | Request::PutCommit { upload: h }
        | Request::PutAbort { upload: h } => Some(h).filter(|h| put::is_upload(h)),
        _ => None,
    }
}

/// A read reply's header in `out` and its data in `body`: as many bytes as
/// the file has at `offset` now, up to `count`. If the file shrinks before
/// they are sent, the server cannot keep the promise and closes the
/// connection (see `server`), so a client never takes other bytes for the
/// file's.
fn read_deferred(
    f: Arc<File>,
    slot: protocol::ReadReplySlot,
    offset: u64,
    count: usize,
    out: &mut Vec<u8>,
    body: &mut Option<FileBody>,
) -> OpResult<usize> {
    let size = f.metadata().map_err(|e| io_error(&e, "read"))?.len();
    let got = size.saturating_sub(offset).min(count as u64) as usize;
    let eof = offset + got as u64 >= size;
    finish_read_reply_header(slot, size, eof, got, out)
        .map_err(|e| err(ErrorCode::Io, format!("internal error: {e}")))?;
    if got > 0 {
        *body = Some(FileBody {
            file: f,
            offset,
            len: got,
        });
    }
    Ok(got)
}

/// Read up to `count` bytes of `f` at `offset` onto the end of `out`,
/// into room not zero-filled first (a memset of every read's size showed
/// in profiles of UDP reads); the bytes read (fewer at the end of the
/// file).
fn pread_append(f: &File, out: &mut Vec<u8>, count: usize, offset: u64) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    out.reserve(count);
    let base = out.len();
    let mut got = 0;
    while got < count {
        let room = &mut out.spare_capacity_mut()[got..count];
        // SAFETY: pread writes at most room.len() bytes into `room`, spare
        // capacity of `out` that is valid for writes.
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                room.as_mut_ptr().cast(),
                room.len(),
                (offset + got as u64) as libc::off_t,
            )
        };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    // SAFETY: pread initialized the `got` bytes after `base`, within the
    // capacity reserved above.
    unsafe { out.set_len(base + got) };
    Ok(got)
}

fn stale(what: &str) -> RemoteError {
    err(
        ErrorCode::Stale,
        format!("{what} was replaced by another file; look it up again"),
    )
}

impl Service {
    pub fn new(
        export_dir: &Path,
        config: ServiceConfig,
        events: Option<EventSink>,
    ) -> io::Result<Service> {
        let export = Export::open(export_dir, config.resolver)?;
        let root_fd = export.open_dir(&RelPath::root())?;
        let root_st = export::stat_fd(root_fd.as_fd())?;
        let epoch = auth::random_nonzero_u64()?;
        let service = Service {
            handles: Mutex::new(HandleTable::new(
                epoch,
                export::identity(&root_st),
                MAX_HANDLES,
                MAX_HANDLE_PATH_BYTES,
            )),
            fds: Mutex::new(FdCache::new(FD_CACHE, FD_TTL)),
            export,
            config,
            started: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
            uploads: Mutex::new(HashMap::new()),
            swept_dirs: Mutex::default(),
            counters: Counters::default(),
            events,
            cookies: CookieJar::new()?,
            backoff: crate::backoff::table(crate::backoff::DEFAULT_CAPACITY),
            hashes: hasher::Queue::new(),
            offload_hashes: AtomicBool::new(false),
            own_users_on: std::sync::OnceLock::new(),
            tcp_hashes: std::sync::atomic::AtomicUsize::new(0),
        };
        // Uploads a killed server left at the root go now; elsewhere, at
        // the first put into their directory.
        service.sweep_once(&RelPath::root(), export::identity(&root_st));
        Ok(service)
    }

    /// Serve, without a token, only peers of this process's user or root
    /// on `port` (the server's, once bound).
    pub fn serve_own_user_only(&self, port: u16) {
        let _ = self.own_users_on.set(port);
    }

    /// Whether a peer may open a session as a local user.
    fn check_local_user(&self, peer: Peer) -> OpResult<()> {
        let Some(&port) = self.own_users_on.get() else {
            return Ok(());
        };
        if self.config.token.is_some() {
            return Ok(());
        }
        let proto = match peer {
            Peer::Udp(_) => local_user::Proto::Udp,
            Peer::Tcp { .. } => local_user::Proto::Tcp,
        };
        local_user::check(proto, peer.addr(), port).map_err(|e| err(ErrorCode::Auth, e.to_string()))
    }

    pub fn resolver(&self) -> Resolver {
        self.export.resolver()
    }

    pub fn export_path(&self) -> &Path {
        self.export.path()
    }

    fn emit(&self, event: ServerEvent) {
        if let Some(sink) = &self.events {
            sink(&event);
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            requests: get(&c.requests),
            replies: get(&c.replies),
            replayed: get(&c.replayed),
            dropped_in_progress: get(&c.dropped_in_progress),
            malformed: get(&c.malformed),
            refused: get(&c.refused),
            bytes_read: get(&c.bytes_read),
            bytes_written: get(&c.bytes_written),
            sessions_opened: get(&c.sessions_opened),
            sessions_open: lock(&self.sessions).len() as u64,
        }
    }

    /// Handle one message from `peer`, appending the reply (if any) to
    /// `out`.
    pub fn handle(
        &self,
        peer: Peer,
        transport: Transport,
        msg: &[u8],
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.handle_deferring(peer, transport, msg, out, None)
    }

    /// [`handle`](Service::handle), where a large read's data may be left
    /// out of `out` and put in `body` for the caller to send after the
    /// reply (TCP only: the data must follow its header on the stream).
    pub(crate) fn handle_deferring(
        &self,
        peer: Peer,
        transport: Transport,
        msg: &[u8],
        out: &mut Vec<u8>,
        body: Option<&mut Option<FileBody>>,
    ) -> Outcome {
        bump(&self.counters.requests);
        let start = out.len();
        let mut validated = false;
        let mut outcome = self.handle_inner(peer, transport, msg, out, &mut validated, body);
        if outcome == Outcome::Reply
            && transport == Transport::Udp
            && !validated
            && !cookie::fit_reply(out, start, msg.len())
        {
            // Not even a bare error fits in the request's size: a source
            // that has not shown it receives datagrams gets nothing.
            outcome = Outcome::Drop;
        }
        if outcome == Outcome::Reply {
            bump(&self.counters.replies);
        } else {
            out.truncate(start);
        }
        outcome
    }

    /// `validated` is set when the reply goes to a source address known to
    /// be real (a session's, or a hello's with a valid cookie).
    fn handle_inner(
        &self,
        peer: Peer,
        transport: Transport,
        msg: &[u8],
        out: &mut Vec<u8>,
        validated: &mut bool,
        file_body: Option<&mut Option<FileBody>>,
    ) -> Outcome {
        let (header, op, req, body) = match self.decode_request(transport, msg, out) {
            Ok(decoded) => decoded,
            Err(outcome) => return outcome,
        };
        if let Request::Hello { nonce, cookie } = req {
            if transport == Transport::Udp && !self.cookies.check(peer.addr(), &cookie) {
                // No state, no event: prove the address first.
                let retry = Reply::Retry {
                    cookie: self.cookies.issue(peer.addr()),
                };
                self.encode(0, header.xid, op, &Ok(retry), out);
                return Outcome::Reply;
            }
            *validated = true;
            return self.welcome(peer, transport, &header, op, nonce, out);
        }
        let session = match self.session_for(&header, peer) {
            Ok(s) => s,
            Err(e) => {
                bump(&self.counters.refused);
                return reply_error(&header, e, out);
            }
        };
        // The session's address or connection is the sender's: real.
        *validated = true;
        session.last_seen.store(self.now_ms(), Ordering::Relaxed);
        if let Some(answered) = self.session_request(&session, &header, op, &req, out) {
            return answered;
        }
        session.confirmed.store(true, Ordering::Relaxed);
        if !op.is_cached() {
            self.execute(&header, op, req, transport, out, file_body);
            return Outcome::Reply;
        }
        if let Err(answered) = self.drc_check(&session, &header, op, body, out) {
            return answered;
        }
        let start = out.len();
        if let (Request::Hash { file }, Peer::Udp(to), true) = (
            &req,
            peer,
            transport == Transport::Udp && self.offload_hashes.load(Ordering::Relaxed),
        ) {
            let job = hasher::Job {
                header,
                file: *file,
                to,
            };
            if self.hashes.submit(job).is_ok() {
                // A hasher thread answers it (and completes the cache entry);
                // a retransmission meanwhile finds it in progress.
                return Outcome::Drop;
            }
            let busy = err(
                ErrorCode::Busy,
                "every hasher of the server is busy; retry later",
            );
            encode_error_reply(header.session, header.xid, op.code(), &busy, out);
        } else {
            // Cached replies are whole: a replay sends the cached bytes.
            self.execute(&header, op, req, transport, out, None);
        }
        lock(&session.drc).complete(header.xid, &out[start..]);
        Outcome::Reply
    }

    /// The request in `msg`: its header, operation and decoded body, or how
    /// to answer what cannot be decoded (nothing, a closed connection, or an
    /// error reply the peer can read).
    fn decode_request<'m>(
        &self,
        transport: Transport,
        msg: &'m [u8],
        out: &mut Vec<u8>,
    ) -> Result<(Header, Op, Request<'m>, &'m [u8]), Outcome> {
        let no_header = match transport {
            Transport::Udp => Outcome::Drop,
            Transport::Tcp => Outcome::Close,
        };
        let Ok((header, body)) = decode_header(msg) else {
            bump(&self.counters.malformed);
            return Err(no_header);
        };
        if header.opcode & REPLY_BIT != 0 {
            // Never answer a reply: two servers must not ping-pong. Over
            // TCP the peer is confused about who is who: close.
            bump(&self.counters.malformed);
            return Err(no_header);
        }
        let op = match request_op(&header) {
            Ok(op) => op,
            Err(DecodeError::Version { got }) => {
                // Answered under the peer's own version, so that an older
                // (or newer) client can read why it is refused.
                bump(&self.counters.malformed);
                let e = err(
                    ErrorCode::Protocol,
                    format!(
                        "v{} required: this server speaks rfs protocol version {}, the client {got}; run the same osprobe version on both sides",
                        protocol::VERSION,
                        protocol::VERSION
                    ),
                );
                encode_error_reply_as(got, header.session, header.xid, header.opcode, &e, out);
                return Err(Outcome::Reply);
            }
            Err(e) => {
                bump(&self.counters.malformed);
                let code = match e {
                    DecodeError::UnknownOp { .. } => ErrorCode::Unsupported,
                    _ => ErrorCode::Protocol,
                };
                return Err(reply_error(&header, err(code, e.to_string()), out));
            }
        };
        let req = match decode_request_body(op, body) {
            Ok(r) => r,
            Err(e) => {
                bump(&self.counters.malformed);
                let code = match e {
                    DecodeError::Name(_) | DecodeError::BadValue { .. } => ErrorCode::Invalid,
                    _ => ErrorCode::Protocol,
                };
                return Err(reply_error(
                    &header,
                    err(code, format!("{op} request: {e}")),
                    out,
                ));
            }
        };
        Ok((header, op, req, body))
    }

    /// Answer a hello whose address is proved: a session, or the refusal.
    fn welcome(
        &self,
        peer: Peer,
        transport: Transport,
        header: &Header,
        op: Op,
        nonce: [u8; 16],
        out: &mut Vec<u8>,
    ) -> Outcome {
        match self
            .check_local_user(peer)
            .and_then(|()| self.hello(peer, transport, nonce))
        {
            Ok((session, welcome)) => {
                self.encode(session, header.xid, op, &Ok(welcome), out);
                Outcome::Reply
            }
            Err(e) => {
                bump(&self.counters.refused);
                // A backed-off address was logged with its wrong token;
                // its retries are not (a guesser would flood the log).
                if !e.detail.starts_with(crate::backoff::REFUSAL) {
                    self.emit(ServerEvent::Refused {
                        peer: peer.addr(),
                        reason: e.to_string(),
                    });
                }
                reply_error(header, e, out)
            }
        }
    }

    /// The requests about the session itself (auth, goodbye), answered here;
    /// any other request of a session that has not authenticated, refused.
    /// `None`: go on and execute it.
    fn session_request(
        &self,
        session: &Session,
        header: &Header,
        op: Op,
        req: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Outcome> {
        match req {
            Request::Auth { proof } => {
                let result = self.auth(session, proof);
                if result.is_err() {
                    bump(&self.counters.refused);
                }
                self.encode(
                    header.session,
                    header.xid,
                    op,
                    &result.map(|_| Reply::Done),
                    out,
                );
                return Some(Outcome::Reply);
            }
            Request::Goodbye => {
                self.end_session(session.id, "goodbye");
                self.encode(header.session, header.xid, op, &Ok(Reply::Done), out);
                return Some(Outcome::Reply);
            }
            _ => {}
        }
        if !session.authenticated.load(Ordering::Acquire) {
            // Refused requests do not confirm the session: a client without
            // the token stays evictable however much it sends.
            bump(&self.counters.refused);
            return Some(reply_error(
                header,
                err(
                    ErrorCode::Auth,
                    "this server requires a token: authenticate the session first",
                ),
                out,
            ));
        }
        None
    }

    /// The duplicate-request cache's verdict on a cached operation: `Ok` to
    /// execute it, or the answer (the cached reply, nothing while it is in
    /// progress, or why it is refused).
    fn drc_check(
        &self,
        session: &Session,
        header: &Header,
        op: Op,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Outcome> {
        let fp = drc::fingerprint(op, body);
        let check = lock(&session.drc).check(header.xid, fp);
        match check {
            Check::New => {}
            Check::Replay(bytes) => {
                bump(&self.counters.replayed);
                out.extend_from_slice(&bytes);
                return Err(Outcome::Reply);
            }
            Check::InProgress => {
                bump(&self.counters.dropped_in_progress);
                return Err(Outcome::Drop);
            }
            Check::Reused => {
                return Err(reply_error(
                    header,
                    err(
                        ErrorCode::Invalid,
                        format!(
                            "request id {} was already used for a different request; not executed",
                            header.xid
                        ),
                    ),
                    out,
                ))
            }
            Check::TooOld { floor } => {
                return Err(reply_error(
                    header,
                    err(
                        ErrorCode::Invalid,
                        format!(
                            "request id {} is older than the duplicate-request cache remembers (ids up to {floor} are forgotten); not executed",
                            header.xid
                        ),
                    ),
                    out,
                ))
            }
            Check::Full => {
                bump(&self.counters.refused);
                return Err(reply_error(
                    header,
                    err(
                        ErrorCode::Busy,
                        "too many requests of this client are in progress; retry",
                    ),
                    out,
                ));
            }
        }
        Ok(())
    }

    /// Send UDP hashes to [`Service::hashes`] from now on (the server runs
    /// hasher threads that call [`Service::run_hash_job`]).
    pub(crate) fn offload_hashes(&self) {
        self.offload_hashes.store(true, Ordering::Relaxed);
    }

    /// Run a queued hash: its reply in `out`, recorded in the session's
    /// duplicate cache (if the session still exists).
    pub(crate) fn run_hash_job(&self, job: &hasher::Job, out: &mut Vec<u8>) {
        // An upload is hashed only for the session that began it, as in
        // `execute`, which a queued hash does not pass through.
        let result = match upload_of(&Request::Hash { file: job.file }) {
            Some(h) => self
                .check_upload_owner(job.header.session, h)
                .and_then(|()| self.hash(&job.file)),
            None => self.hash(&job.file),
        };
        self.encode(job.header.session, job.header.xid, Op::Hash, &result, out);
        let session = lock(&self.sessions).get(&job.header.session).cloned();
        if let Some(s) = session {
            lock(&s.drc).complete(job.header.xid, out);
        }
    }

    fn encode(
        &self,
        session: u64,
        xid: u64,
        op: Op,
        result: &OpResult<Reply<'_>>,
        out: &mut Vec<u8>,
    ) {
        if let Err(e) = encode_reply(session, xid, op, result, out) {
            // Only a bug can get here (every reply is built within limits);
            // the client still gets an answer.
            encode_error_reply(
                session,
                xid,
                op.code(),
                &err(
                    ErrorCode::Io,
                    format!("internal error encoding the reply: {e}"),
                ),
                out,
            );
        }
    }

    fn execute(
        &self,
        header: &Header,
        op: Op,
        req: Request<'_>,
        transport: Transport,
        out: &mut Vec<u8>,
        body: Option<&mut Option<FileBody>>,
    ) {
        if let Some(Err(e)) = upload_of(&req).map(|h| self.check_upload_owner(header.session, h)) {
            self.encode(header.session, header.xid, op, &Err(e), out);
            return;
        }
        let result = match req {
            Request::Read {
                file,
                offset,
                count,
            } => {
                let start = out.len();
                match self.read(header, transport, &file, offset, count, out, body) {
                    Ok(n) => {
                        self.counters
                            .bytes_read
                            .fetch_add(n as u64, Ordering::Relaxed);
                        return;
                    }
                    Err(e) => {
                        out.truncate(start);
                        Err(e)
                    }
                }
            }
            Request::Lookup { dir, name } => self.lookup(&dir, name),
            Request::Create {
                dir,
                name,
                mode,
                how,
            } => self.create(&dir, name, mode, how),
            Request::Write { file, offset, data } => self.write(&file, offset, data),
            Request::Getattr { handle } => self.getattr(&handle).map(Reply::Attr),
            Request::Readdir {
                dir,
                cookie,
                max_entries,
            } => self.readdir(&dir, cookie, max_entries, transport),
            Request::Remove { dir, name } => self.remove(&dir, name),
            Request::Hash { file } if transport == Transport::Tcp => self.hash_bounded(&file),
            Request::Hash { file } => self.hash(&file),
            Request::Commit { file } => self.commit(&file),
            Request::PutBegin {
                dir,
                name,
                mode,
                size,
            } => self.put_begin(header.session, &dir, name, mode, size),
            Request::PutCommit { upload } => self.put_commit(header.session, &upload),
            Request::PutAbort { upload } => self.put_abort(header.session, &upload),
            Request::Hello { .. } | Request::Auth { .. } | Request::Goodbye => Err(err(
                ErrorCode::Invalid,
                "session requests are handled earlier",
            )),
        };
        self.encode(header.session, header.xid, op, &result, out);
    }

    // -- sessions ----------------------------------------------------------

    fn hello(
        &self,
        peer: Peer,
        transport: Transport,
        nonce: [u8; 16],
    ) -> OpResult<(u64, Reply<'static>)> {
        let mut sessions = lock(&self.sessions);
        let existing = sessions
            .values()
            .find(|s| s.peer == peer && s.client_nonce == nonce)
            .cloned();
        let session = match existing {
            // A retransmitted hello: the same session again.
            Some(s) => s,
            None => {
                self.admit(peer, &mut sessions)?;
                let id = fresh_session_id(&sessions)?;
                let server_nonce =
                    auth::random_bytes::<32>().map_err(|e| io_error(&e, "random nonce"))?;
                let s = Arc::new(Session {
                    id,
                    peer,
                    transport,
                    client_nonce: nonce,
                    server_nonce,
                    authenticated: AtomicBool::new(self.config.token.is_none()),
                    confirmed: AtomicBool::new(false),
                    last_seen: AtomicU64::new(self.now_ms()),
                    created: Instant::now(),
                    drc: Mutex::new(Drc::new(self.config.drc_budget)),
                    uploads: Mutex::default(),
                });
                sessions.insert(id, Arc::clone(&s));
                bump(&self.counters.sessions_opened);
                self.emit(ServerEvent::SessionOpened {
                    peer: peer.addr(),
                    transport,
                    session: id,
                });
                s
            }
        };
        let root = lock(&self.handles).root();
        Ok((
            session.id,
            Reply::Welcome {
                nonce: session.server_nonce,
                auth_required: self.config.token.is_some(),
                root,
                max_data: session.transport.max_data() as u32,
                drc_span: Drc::span(self.config.drc_budget),
            },
        ))
    }

    fn session_for(&self, header: &Header, peer: Peer) -> OpResult<Arc<Session>> {
        let sessions = lock(&self.sessions);
        let Some(s) = sessions.get(&header.session) else {
            return Err(err(
                ErrorCode::BadSession,
                // No advice here: BADSESSION itself tells the client to
                // connect again, and it says so (client::session_advice).
                format!("unknown session {:016x}", header.session),
            ));
        };
        if s.peer != peer {
            return Err(err(
                ErrorCode::BadSession,
                format!(
                    "session {:016x} belongs to another client address or connection",
                    header.session
                ),
            ));
        }
        Ok(Arc::clone(s))
    }

    fn auth(&self, session: &Session, proof: &[u8; 32]) -> OpResult<()> {
        let Some(token) = &self.config.token else {
            return Ok(()); // nothing to prove
        };
        if auth::verify(
            token,
            &session.server_nonce,
            &session.client_nonce,
            session.id,
            proof,
        ) {
            self.backoff.succeeded(session.peer.addr().ip());
            self.promote(session)
        } else {
            self.backoff.failed(session.peer.addr().ip());
            self.end_session(session.id, "wrong token");
            self.emit(ServerEvent::Refused {
                peer: session.peer.addr(),
                reason: "wrong token".into(),
            });
            Err(err(
                ErrorCode::Auth,
                "wrong token: the proof does not match the server's token; the session is closed",
            ))
        }
    }

    fn end_session(&self, id: u64, reason: &'static str) {
        let removed = lock(&self.sessions).remove(&id);
        if let Some(s) = removed {
            self.emit(ServerEvent::SessionEnded {
                peer: s.peer.addr(),
                session: id,
                reason,
            });
        }
    }

    /// Whether TCP connection `conn` has a session that may make requests
    /// (authenticated, or no token needed).
    pub fn connection_ready(&self, conn: u64) -> bool {
        lock(&self.sessions).values().any(|s| {
            matches!(s.peer, Peer::Tcp { conn: c, .. } if c == conn)
                && s.authenticated.load(Ordering::Acquire)
        })
    }

    /// End the sessions of a closed TCP connection.
    pub fn end_connection(&self, conn: u64) {
        let ids: Vec<u64> = lock(&self.sessions)
            .values()
            .filter(|s| matches!(s.peer, Peer::Tcp { conn: c, .. } if c == conn))
            .map(|s| s.id)
            .collect();
        for id in ids {
            self.end_session(id, "connection closed");
        }
    }

    /// Forget idle UDP sessions and sessions that never authenticated.
    pub fn expire_sessions(&self) {
        let mut sessions = lock(&self.sessions);
        self.expire_locked(&mut sessions);
    }

    fn expire_locked(&self, sessions: &mut HashMap<u64, Arc<Session>>) {
        let now = self.now_ms();
        let idle_ms = self.config.session_idle.as_millis() as u64;
        let mut ended = Vec::new();
        sessions.retain(|_, s| {
            let idle = now.saturating_sub(s.last_seen.load(Ordering::Relaxed));
            let unauthenticated = (!s.authenticated.load(Ordering::Acquire)
                || !s.confirmed.load(Ordering::Relaxed))
                && s.created.elapsed() > AUTH_GRACE;
            let expired = matches!(s.peer, Peer::Udp(_)) && idle > idle_ms;
            if expired || unauthenticated {
                ended.push((
                    s.peer.addr(),
                    s.id,
                    if expired {
                        "idle"
                    } else {
                        "never authenticated"
                    },
                ));
                false
            } else {
                true
            }
        });
        for (peer, session, reason) in ended {
            self.emit(ServerEvent::SessionEnded {
                peer,
                session,
                reason,
            });
        }
    }

    // -- handles -----------------------------------------------------------

    fn resolve(&self, h: &Handle) -> OpResult<Resolved> {
        lock(&self.handles).resolve(h).ok_or_else(|| {
            err(
                ErrorCode::Stale,
                "unknown file handle (the server restarted or forgot it); look the name up again",
            )
        })
    }

    fn resolve_dir(&self, h: &Handle) -> OpResult<Resolved> {
        let r = self.resolve(h)?;
        if r.kind != Kind::Dir {
            return Err(err(
                ErrorCode::NotDir,
                format!(
                    "{} is a {}, not a directory",
                    show_path(&r.path),
                    r.kind.name()
                ),
            ));
        }
        Ok(r)
    }

    /// An `O_PATH` descriptor of the directory `r`, checked to be the same
    /// directory the handle was made for.
    fn open_dir(&self, r: &Resolved) -> OpResult<std::os::fd::OwnedFd> {
        let what = show_path(&r.path);
        let fd = self
            .export
            .open_dir(&r.path)
            .map_err(|e| handle_io_error(&e, &what))?;
        let st = export::stat_fd(fd.as_fd()).map_err(|e| io_error(&e, &what))?;
        if export::identity(&st) != r.identity {
            return Err(stale(&what));
        }
        Ok(fd)
    }

    /// The open regular file of handle `h`, for reading or writing.
    fn open_file(&self, h: &Handle, write: bool) -> OpResult<Arc<File>> {
        if put::is_upload(h) {
            return self.upload_file(h);
        }
        let r = self.resolve(h)?;
        let what = show_path(&r.path);
        match r.kind {
            Kind::File => {}
            Kind::Dir => return Err(err(ErrorCode::IsDir, format!("{what} is a directory"))),
            k => {
                return Err(err(
                    ErrorCode::Invalid,
                    format!(
                        "{what} is a {}: only regular files are read and written",
                        k.name()
                    ),
                ))
            }
        }
        if let Some(f) = lock(&self.fds).get(r.index, write) {
            return Ok(f);
        }
        // Reads open read-only: a read needs no more, and a binary running
        // on the server refuses opens for writing ("Text file busy").
        let access = if write { libc::O_RDWR } else { libc::O_RDONLY };
        let fd = self
            .export
            .open_at(&r.path, access | libc::O_NONBLOCK | libc::O_NOCTTY, 0)
            .map_err(|e| handle_io_error(&e, &what))?;
        let st = export::stat_fd(fd.as_fd()).map_err(|e| io_error(&e, &what))?;
        if export::identity(&st) != r.identity || export::kind_of(st.st_mode) != Kind::File {
            return Err(stale(&what));
        }
        if write {
            refuse_hard_links(&st, &what)?;
        }
        let writable = write;
        let file = Arc::new(File::from(fd));
        lock(&self.fds).put(r.index, Arc::clone(&file), writable);
        Ok(file)
    }

    fn check_writable(&self) -> OpResult<()> {
        if self.config.read_only {
            Err(err(ErrorCode::ReadOnly, "the export is read-only"))
        } else {
            Ok(())
        }
    }

    // -- operations ----------------------------------------------------------

    fn lookup(&self, dir: &Handle, name: &[u8]) -> OpResult<Reply<'static>> {
        let d = self.resolve_dir(dir)?;
        let what = quoted(name);
        let path = d.path.join(name).ok_or_else(|| {
            err(
                ErrorCode::NameTooLong,
                format!("{what}: the path is too long"),
            )
        })?;
        let dfd = self.open_dir(&d)?;
        let st = export::stat_in(dfd.as_fd(), name).map_err(|e| io_error(&e, &what))?;
        let kind = export::kind_of(st.st_mode);
        if kind == Kind::Symlink {
            return Err(err(
                ErrorCode::Access,
                format!("{what} is a symbolic link; rfs does not follow symbolic links"),
            ));
        }
        let (handle, dropped) = lock(&self.handles).intern(path, kind, export::identity(&st));
        if let Some(i) = dropped {
            lock(&self.fds).forget(i);
        }
        Ok(Reply::Handle {
            handle,
            attr: export::attr_of(&st),
        })
    }

    fn create(
        &self,
        dir: &Handle,
        name: &[u8],
        mode: u32,
        how: CreateHow,
    ) -> OpResult<Reply<'static>> {
        self.check_writable()?;
        let d = self.resolve_dir(dir)?;
        let what = quoted(name);
        let path = d.path.join(name).ok_or_else(|| {
            err(
                ErrorCode::NameTooLong,
                format!("{what}: the path is too long"),
            )
        })?;
        let dfd = self.open_dir(&d)?;
        let flags = libc::O_CREAT
            | libc::O_RDWR
            | libc::O_NONBLOCK
            | libc::O_NOCTTY
            | match how {
                CreateHow::Exclusive => libc::O_EXCL,
                // Truncated below, once it is known not to be a hard link.
                CreateHow::Truncate => 0,
            };
        let fd = export::open_in(dfd.as_fd(), name, flags, mode & protocol::MAX_CREATE_MODE)
            .map_err(|e| io_error(&e, &what))?;
        let mut st = export::stat_fd(fd.as_fd()).map_err(|e| io_error(&e, &what))?;
        if export::kind_of(st.st_mode) != Kind::File {
            return Err(err(
                ErrorCode::Invalid,
                format!("{what} exists and is not a regular file"),
            ));
        }
        refuse_hard_links(&st, &what)?;
        let file = File::from(fd);
        if how == CreateHow::Truncate && st.st_size != 0 {
            file.set_len(0).map_err(|e| io_error(&e, &what))?;
            st = export::stat_fd(file.as_fd()).map_err(|e| io_error(&e, &what))?;
        }
        self.created(path, file, &st)
    }

    /// Register a file just created (or truncated) under `path`: its
    /// handle, and its descriptor in the cache for the writes that follow.
    fn created(&self, path: RelPath, file: File, st: &libc::stat) -> OpResult<Reply<'static>> {
        let (handle, dropped) = lock(&self.handles).intern(path, Kind::File, export::identity(st));
        let (_, index) = handle.parts();
        {
            let mut fds = lock(&self.fds);
            if let Some(i) = dropped {
                fds.forget(i);
            }
            fds.put(index, Arc::new(file), true);
        }
        Ok(Reply::Handle {
            handle,
            attr: export::attr_of(st),
        })
    }

    /// A read reply built in place in `out`, or its header there and its
    /// data in `body` when the caller takes one; returns the bytes read.
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        header: &Header,
        transport: Transport,
        file: &Handle,
        offset: u64,
        count: u32,
        out: &mut Vec<u8>,
        body: Option<&mut Option<FileBody>>,
    ) -> OpResult<usize> {
        let count = count as usize;
        if count > transport.max_data() {
            return Err(err(
                ErrorCode::TooBig,
                format!(
                    "a read of {count} bytes exceeds the {transport} limit of {} bytes",
                    transport.max_data()
                ),
            ));
        }
        let f = self.open_file(file, false)?;
        let slot = begin_read_reply(header.session, header.xid, out);
        if let Some(body) = body.filter(|_| count >= FILE_BODY_MIN) {
            return read_deferred(f, slot, offset, count, out, body);
        }
        let got = pread_append(&f, out, count, offset).map_err(|e| io_error(&e, "read"))?;
        let size = f.metadata().map_err(|e| io_error(&e, "read"))?.len();
        let eof = offset + got as u64 >= size;
        finish_read_reply(slot, size, eof, out)
            .map_err(|e| err(ErrorCode::Io, format!("internal error: {e}")))?;
        Ok(got)
    }

    fn write(&self, file: &Handle, offset: u64, data: &[u8]) -> OpResult<Reply<'static>> {
        self.check_writable()?;
        let end = offset.saturating_add(data.len() as u64);
        if end > self.config.max_file_size {
            // One write at a large offset must not create a huge (sparse)
            // file.
            return Err(err(
                ErrorCode::TooBig,
                format!(
                    "a write up to byte {end} is beyond the server's file size limit of {} bytes",
                    self.config.max_file_size
                ),
            ));
        }
        let f = self.open_file(file, true)?;
        f.write_all_at(data, offset)
            .map_err(|e| io_error(&e, "write"))?;
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let size = f.metadata().map_err(|e| io_error(&e, "write"))?.len();
        Ok(Reply::Written {
            count: data.len() as u32,
            size,
        })
    }

    fn getattr(&self, h: &Handle) -> OpResult<Attr> {
        if put::is_upload(h) {
            let f = self.upload_file(h)?;
            let st = export::stat_fd(f.as_fd()).map_err(|e| io_error(&e, "the upload"))?;
            return Ok(export::attr_of(&st));
        }
        let r = self.resolve(h)?;
        let what = show_path(&r.path);
        let st = match r.path.split_last() {
            None => {
                let fd = self.open_dir(&r)?;
                export::stat_fd(fd.as_fd()).map_err(|e| io_error(&e, &what))?
            }
            Some((parent, name)) => {
                let pfd = self
                    .export
                    .open_dir(&parent)
                    .map_err(|e| handle_io_error(&e, &what))?;
                export::stat_in(pfd.as_fd(), name).map_err(|e| handle_io_error(&e, &what))?
            }
        };
        if export::identity(&st) != r.identity {
            return Err(stale(&what));
        }
        Ok(export::attr_of(&st))
    }

    fn readdir(
        &self,
        dir: &Handle,
        cookie: u64,
        max_entries: u16,
        transport: Transport,
    ) -> OpResult<Reply<'static>> {
        let d = self.resolve_dir(dir)?;
        let what = show_path(&d.path);
        let fd = self
            .export
            .open_at(
                &d.path,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NONBLOCK,
                0,
            )
            .map_err(|e| handle_io_error(&e, &what))?;
        let st = export::stat_fd(fd.as_fd()).map_err(|e| io_error(&e, &what))?;
        if export::identity(&st) != d.identity {
            return Err(stale(&what));
        }
        // Header, status, eof, count; then 10 bytes plus the name per entry.
        let budget = transport.max_message() - protocol::HEADER_LEN - 4;
        let mut used = 0;
        let mut entries: Vec<DirEntry> = Vec::new();
        let eof = export::read_dir(fd, cookie, |c, kind, name| {
            let cost = 10 + name.len();
            if entries.len() >= usize::from(max_entries) || used + cost > budget {
                return false;
            }
            if protocol::validate_name(name).is_err() {
                return true; // cannot happen for names the kernel returns
            }
            used += cost;
            entries.push(DirEntry {
                cookie: c,
                kind,
                name: name.to_vec(),
            });
            true
        })
        .map_err(|e| io_error(&e, &what))?;
        Ok(Reply::Entries { eof, entries })
    }

    fn remove(&self, dir: &Handle, name: &[u8]) -> OpResult<Reply<'static>> {
        self.check_writable()?;
        let d = self.resolve_dir(dir)?;
        let what = quoted(name);
        let dfd = self.open_dir(&d)?;
        let st = export::stat_in(dfd.as_fd(), name).map_err(|e| io_error(&e, &what))?;
        let is_dir = export::kind_of(st.st_mode) == Kind::Dir;
        export::unlink_in(dfd.as_fd(), name, is_dir).map_err(|e| io_error(&e, &what))?;
        if let Some(path) = d.path.join(name) {
            if let Some(i) = lock(&self.handles).forget(&path) {
                lock(&self.fds).forget(i);
            }
        }
        Ok(Reply::Done)
    }

    fn hash(&self, file: &Handle) -> OpResult<Reply<'static>> {
        let f = self.open_file(file, false)?;
        let (size, hash) = hasher::hash_file(&f, self.config.hash)?;
        Ok(Reply::Hash {
            size,
            hash: hash.to_be_bytes(),
        })
    }

    /// A Hash on a TCP connection's thread, if fewer than
    /// [`hasher::HASHERS`] run there now (BUSY otherwise, as UDP's full
    /// queue is): one thread per connection must not mean one whole-file
    /// read per connection at once.
    fn hash_bounded(&self, file: &Handle) -> OpResult<Reply<'static>> {
        let taken = self
            .tcp_hashes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < hasher::HASHERS).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(err(
                ErrorCode::Busy,
                "every hasher of the server is busy; retry later",
            ));
        }
        let result = self.hash(file);
        self.tcp_hashes.fetch_sub(1, Ordering::AcqRel);
        result
    }

    fn commit(&self, file: &Handle) -> OpResult<Reply<'static>> {
        let f = self.open_file(file, false)?;
        f.sync_all().map_err(|e| io_error(&e, "commit"))?;
        Ok(Reply::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode_reply, encode_request, MAX_UDP_DATA};

    const PEER: &str = "127.0.0.1:40000";

    struct T {
        svc: Service,
        dir: tempfile::TempDir,
        session: u64,
        root: Handle,
        xid: u64,
        peer: Peer,
    }

    fn config() -> ServiceConfig {
        ServiceConfig {
            read_only: false,
            token: None,
            max_clients: 4,
            max_unauthenticated: 8,
            max_unauthenticated_per_source: 4,
            drc_budget: 64 * 1024,
            session_idle: Duration::from_secs(60),
            resolver: None,
            max_file_size: 1 << 20,
            hash: hasher::Limits {
                max_bytes: 1 << 20,
                timeout: Duration::from_secs(60),
            },
        }
    }

    impl T {
        fn new() -> T {
            T::with(config())
        }

        fn with(config: ServiceConfig) -> T {
            let dir = tempfile::tempdir().unwrap();
            let svc = Service::new(dir.path(), config, None).unwrap();
            let mut t = T {
                svc,
                dir,
                session: 0,
                root: Handle([0; 16]),
                xid: 0,
                peer: Peer::Udp(PEER.parse().unwrap()),
            };
            let (h, r) = t.hello([1; 16]);
            match r.unwrap() {
                Reply::Welcome { root, .. } => t.root = root,
                other => panic!("{other:?}"),
            }
            t.session = h.session;
            t
        }

        /// A hello with the cookie round trip a UDP client makes.
        fn hello(&mut self, nonce: [u8; 16]) -> (Header, OpResult<Reply<'static>>) {
            let first = Request::Hello {
                nonce,
                cookie: [0; protocol::COOKIE_LEN],
            };
            let (_, r) = self.send_raw(0, &first);
            let Ok(Reply::Retry { cookie }) = r else {
                panic!("a hello without a cookie got {r:?}")
            };
            self.send_raw(0, &Request::Hello { nonce, cookie })
        }

        fn message(&mut self, xid: u64, req: &Request<'_>) -> Vec<u8> {
            let mut m = Vec::new();
            encode_request(self.session, xid, req, &mut m).unwrap();
            m
        }

        fn send_bytes(&self, msg: &[u8]) -> Option<Vec<u8>> {
            let mut out = Vec::new();
            match self.svc.handle(self.peer, Transport::Udp, msg, &mut out) {
                Outcome::Reply => Some(out),
                _ => None,
            }
        }

        fn send_raw(&mut self, xid: u64, req: &Request<'_>) -> (Header, OpResult<Reply<'static>>) {
            let m = self.message(xid, req);
            let out = self.send_bytes(&m).expect("a reply");
            let (h, op, r) = decode_reply(&out).unwrap();
            assert_eq!(op, req.op());
            assert_eq!(h.xid, xid);
            (h, r.map(owned))
        }

        fn send(&mut self, req: &Request<'_>) -> OpResult<Reply<'static>> {
            self.xid += 1;
            let xid = self.xid;
            self.send_raw(xid, req).1
        }

        fn create(&mut self, name: &str) -> Handle {
            match self
                .send(&Request::Create {
                    dir: self.root,
                    name: name.as_bytes(),
                    mode: 0o644,
                    how: CreateHow::Exclusive,
                })
                .unwrap()
            {
                Reply::Handle { handle, .. } => handle,
                other => panic!("{other:?}"),
            }
        }

        fn lookup(&mut self, name: &[u8]) -> OpResult<Handle> {
            self.send(&Request::Lookup {
                dir: self.root,
                name,
            })
            .map(|r| match r {
                Reply::Handle { handle, .. } => handle,
                other => panic!("{other:?}"),
            })
        }
    }

    /// Replies with their data copied, so tests can keep them.
    fn owned(r: Reply<'_>) -> Reply<'static> {
        match r {
            Reply::Data { size, eof, data } => Reply::Data {
                size,
                eof,
                data: Box::leak(data.to_vec().into_boxed_slice()),
            },
            Reply::Welcome {
                nonce,
                auth_required,
                root,
                max_data,
                drc_span,
            } => Reply::Welcome {
                nonce,
                auth_required,
                root,
                max_data,
                drc_span,
            },
            Reply::Retry { cookie } => Reply::Retry { cookie },
            Reply::Done => Reply::Done,
            Reply::Handle { handle, attr } => Reply::Handle { handle, attr },
            Reply::Written { count, size } => Reply::Written { count, size },
            Reply::Attr(a) => Reply::Attr(a),
            Reply::Entries { eof, entries } => Reply::Entries { eof, entries },
            Reply::Hash { size, hash } => Reply::Hash { size, hash },
        }
    }

    fn result(msg: &[u8]) -> OpResult<Reply<'static>> {
        decode_reply(msg).unwrap().2.map(owned)
    }

    fn code(r: OpResult<impl fmt::Debug>) -> ErrorCode {
        r.expect_err("an error").code
    }

    #[test]
    fn large_reads_leave_their_data_to_the_caller_when_it_takes_it() {
        let mut t = T::new();
        let f = t.create("f");
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
        t.send(&Request::Write {
            file: f,
            offset: 0,
            data: &data,
        })
        .unwrap();
        // (offset, count) -> the bytes of the reply, read as a client would.
        let mut read = |offset: u64, count: u32| -> (Option<usize>, Vec<u8>) {
            t.xid += 1;
            let m = t.message(
                t.xid,
                &Request::Read {
                    file: f,
                    offset,
                    count,
                },
            );
            let (mut out, mut body) = (Vec::new(), None);
            let o = t
                .svc
                .handle_deferring(t.peer, Transport::Udp, &m, &mut out, Some(&mut body));
            assert_eq!(o, Outcome::Reply);
            let deferred = body.as_ref().map(|b: &FileBody| b.len);
            if let Some(b) = body {
                let mut bytes = vec![0u8; b.len];
                b.file.read_exact_at(&mut bytes, b.offset).unwrap();
                out.extend_from_slice(&bytes);
            }
            (deferred, out)
        };
        for (offset, count, deferred) in [
            (1000u64, 32_768u32, Some(32_768)),
            (30_000, 32_768, Some(10_000)),
            (40_000, 32_768, None),
            (50_000, 32_768, None),
            (0, 4096, None),
        ] {
            let (got, msg) = read(offset, count);
            assert_eq!(got, deferred, "read of {count} at {offset}");
            let (_, _, r) = decode_reply(&msg).unwrap();
            let Ok(Reply::Data { size, eof, data: d }) = r else {
                panic!("{r:?}")
            };
            let from = (offset as usize).min(data.len());
            let to = (from + count as usize).min(data.len());
            assert_eq!(
                (size, d),
                (40_000, &data[from..to]),
                "read of {count} at {offset}"
            );
            assert_eq!(eof, to == data.len());
        }
    }

    #[test]
    fn create_write_read_stat_readdir_remove() {
        let mut t = T::new();
        let h = t.create("a.txt");
        let w = t
            .send(&Request::Write {
                file: h,
                offset: 0,
                data: b"hello world",
            })
            .unwrap();
        assert_eq!(
            w,
            Reply::Written {
                count: 11,
                size: 11
            }
        );
        let r = t
            .send(&Request::Read {
                file: h,
                offset: 6,
                count: 100,
            })
            .unwrap();
        assert_eq!(
            r,
            Reply::Data {
                size: 11,
                eof: true,
                data: b"world"
            }
        );
        match t.send(&Request::Getattr { handle: h }).unwrap() {
            Reply::Attr(a) => {
                assert_eq!(a.size, 11);
                assert_eq!(a.kind, Kind::File);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.lookup(b"a.txt").unwrap(), h, "lookups share the handle");
        match t
            .send(&Request::Readdir {
                dir: t.root,
                cookie: 0,
                max_entries: 10,
            })
            .unwrap()
        {
            Reply::Entries { eof, entries } => {
                assert!(eof);
                assert_eq!(entries.len(), 1);
                assert_eq!(entries[0].name, b"a.txt");
            }
            other => panic!("{other:?}"),
        }
        match t.send(&Request::Hash { file: h }).unwrap() {
            Reply::Hash { size, hash } => {
                assert_eq!(size, 11);
                assert_eq!(
                    u128::from_be_bytes(hash),
                    xxhash_rust::xxh3::xxh3_128(b"hello world")
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.send(&Request::Commit { file: h }).unwrap(), Reply::Done);
        assert_eq!(
            t.send(&Request::Remove {
                dir: t.root,
                name: b"a.txt"
            })
            .unwrap(),
            Reply::Done
        );
        assert!(!t.dir.path().join("a.txt").exists());
        assert_eq!(
            code(t.send(&Request::Read {
                file: h,
                offset: 0,
                count: 1
            })),
            ErrorCode::Stale
        );
        assert_eq!(code(t.lookup(b"a.txt")), ErrorCode::NoEnt);
    }

    #[test]
    fn a_replayed_write_is_not_applied_twice() {
        let mut t = T::new();
        let h = t.create("f");
        let first = t.message(
            100,
            &Request::Write {
                file: h,
                offset: 0,
                data: b"AAAA",
            },
        );
        let reply1 = t.send_bytes(&first).unwrap();
        // Someone changes the file locally after the write was answered.
        std::fs::write(t.dir.path().join("f"), b"local").unwrap();
        // The identical retransmission gets the cached reply, and the file
        // keeps the local change: the write did not run again.
        let reply2 = t.send_bytes(&first).unwrap();
        assert_eq!(reply1, reply2);
        assert_eq!(std::fs::read(t.dir.path().join("f")).unwrap(), b"local");
        // The same id with different data is refused, the file unchanged.
        let other = t.message(
            100,
            &Request::Write {
                file: h,
                offset: 0,
                data: b"BBBBBBBB",
            },
        );
        let e = result(&t.send_bytes(&other).unwrap()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid);
        assert!(e.detail.contains("already used"), "{e}");
        assert_eq!(std::fs::read(t.dir.path().join("f")).unwrap(), b"local");
        assert_eq!(t.svc.stats().replayed, 1);
    }

    #[test]
    fn a_replayed_create_or_remove_returns_the_cached_reply() {
        let mut t = T::new();
        let create = t.message(
            7,
            &Request::Create {
                dir: t.root,
                name: b"new",
                mode: 0o600,
                how: CreateHow::Exclusive,
            },
        );
        let r1 = t.send_bytes(&create).unwrap();
        let r2 = t.send_bytes(&create).unwrap();
        assert_eq!(r1, r2, "not EXIST: the cached success");
        assert!(decode_reply(&r2).unwrap().2.is_ok());
        let remove = t.message(
            8,
            &Request::Remove {
                dir: t.root,
                name: b"new",
            },
        );
        let r1 = t.send_bytes(&remove).unwrap();
        let r2 = t.send_bytes(&remove).unwrap();
        assert_eq!(r1, r2, "not NOENT: the cached success");
        assert!(decode_reply(&r2).unwrap().2.is_ok());
        // A fresh request id runs again and now fails.
        t.xid = 8;
        assert_eq!(
            code(t.send(&Request::Remove {
                dir: t.root,
                name: b"new"
            })),
            ErrorCode::NoEnt
        );
    }

    #[test]
    fn the_cache_floor_refuses_forgotten_ids() {
        let mut c = config();
        c.drc_budget = 8 * drc::ENTRY_COST;
        let mut t = T::with(c);
        let h = t.create("f");
        for _ in 0..100 {
            t.send(&Request::Write {
                file: h,
                offset: 0,
                data: b"x",
            })
            .unwrap();
        }
        let old = t.message(
            2,
            &Request::Write {
                file: h,
                offset: 0,
                data: b"y",
            },
        );
        assert_eq!(
            code(result(&t.send_bytes(&old).unwrap())),
            ErrorCode::Invalid
        );
        assert_eq!(std::fs::read(t.dir.path().join("f")).unwrap(), b"x");
    }

    #[test]
    fn names_that_escape_are_refused() {
        let t = T::new();
        for bad in [&b".."[..], b".", b"/etc/passwd", b"../x", b"a\0b", b""] {
            // The encoder refuses them, so build the message by hand.
            let mut m = Vec::new();
            encode_request(t.session, 900, &Request::Getattr { handle: t.root }, &mut m).unwrap();
            m[3] = Op::Lookup.code();
            m.push(bad.len() as u8);
            m.extend_from_slice(bad);
            let out = t.send_bytes(&m).unwrap();
            let (_, _, r) = decode_reply(&out).unwrap();
            assert_eq!(r.unwrap_err().code, ErrorCode::Invalid, "{bad:?}");
        }
    }

    #[test]
    fn symlinks_inside_the_export_lead_nowhere() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        for resolver in [Some(Resolver::Walk), None] {
            let mut c = config();
            c.resolver = resolver;
            let mut t = T::with(c);
            let root = t.dir.path().to_path_buf();
            std::os::unix::fs::symlink(outside.path().join("secret"), root.join("s")).unwrap();
            std::os::unix::fs::symlink(outside.path(), root.join("d")).unwrap();
            std::os::unix::fs::symlink(outside.path().join("new"), root.join("dangling")).unwrap();
            assert_eq!(code(t.lookup(b"s")), ErrorCode::Access);
            assert_eq!(code(t.lookup(b"d")), ErrorCode::Access);
            for how in [CreateHow::Exclusive, CreateHow::Truncate] {
                let r = t.send(&Request::Create {
                    dir: t.root,
                    name: b"dangling",
                    mode: 0o644,
                    how,
                });
                assert!(matches!(code(r), ErrorCode::Access | ErrorCode::Exist));
                let r = t.send(&Request::Create {
                    dir: t.root,
                    name: b"s",
                    mode: 0o644,
                    how,
                });
                assert!(matches!(code(r), ErrorCode::Access | ErrorCode::Exist));
            }
            assert!(!outside.path().join("new").exists());
            assert_eq!(
                std::fs::read(outside.path().join("secret")).unwrap(),
                b"secret"
            );
            // A directory swapped for a link to the outside after lookup:
            // the handle goes stale instead of following the link.
            std::fs::create_dir(root.join("sub")).unwrap();
            let sub = t.lookup(b"sub").unwrap();
            std::fs::remove_dir(root.join("sub")).unwrap();
            std::os::unix::fs::symlink(outside.path(), root.join("sub")).unwrap();
            let r = t.send(&Request::Lookup {
                dir: sub,
                name: b"secret",
            });
            assert!(matches!(code(r), ErrorCode::Stale | ErrorCode::Access));
            let r = t.send(&Request::Create {
                dir: sub,
                name: b"planted",
                mode: 0o644,
                how: CreateHow::Exclusive,
            });
            assert!(matches!(code(r), ErrorCode::Stale | ErrorCode::Access));
            assert!(!outside.path().join("planted").exists());
            // A file replaced by a link after lookup: stale, not followed.
            std::fs::write(root.join("f"), b"inside").unwrap();
            let f = t.lookup(b"f").unwrap();
            std::fs::remove_file(root.join("f")).unwrap();
            std::os::unix::fs::symlink(outside.path().join("secret"), root.join("f")).unwrap();
            std::thread::sleep(FD_TTL / 10);
            let r = t.send(&Request::Write {
                file: f,
                offset: 0,
                data: b"PWNED",
            });
            assert!(matches!(code(r), ErrorCode::Stale | ErrorCode::Access));
            assert_eq!(
                std::fs::read(outside.path().join("secret")).unwrap(),
                b"secret"
            );
            // Listing shows links as links.
            match t
                .send(&Request::Readdir {
                    dir: t.root,
                    cookie: 0,
                    max_entries: 100,
                })
                .unwrap()
            {
                Reply::Entries { entries, .. } => {
                    let s = entries.iter().find(|e| e.name == b"s").unwrap();
                    assert_eq!(s.kind, Kind::Symlink);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn read_only_exports_refuse_changes() {
        let mut c = config();
        c.read_only = true;
        let mut t = T::with(c);
        std::fs::write(t.dir.path().join("f"), b"data").unwrap();
        let h = t.lookup(b"f").unwrap();
        assert!(t
            .send(&Request::Read {
                file: h,
                offset: 0,
                count: 4
            })
            .is_ok());
        assert_eq!(
            code(t.send(&Request::Write {
                file: h,
                offset: 0,
                data: b"x"
            })),
            ErrorCode::ReadOnly
        );
        assert_eq!(
            code(t.send(&Request::Create {
                dir: t.root,
                name: b"g",
                mode: 0o644,
                how: CreateHow::Truncate
            })),
            ErrorCode::ReadOnly
        );
        assert_eq!(
            code(t.send(&Request::Remove {
                dir: t.root,
                name: b"f"
            })),
            ErrorCode::ReadOnly
        );
        assert_eq!(std::fs::read(t.dir.path().join("f")).unwrap(), b"data");
    }

    #[test]
    fn sessions_are_checked() {
        let mut t = T::new();
        // Unknown session.
        let saved = t.session;
        t.session = 12345;
        assert_eq!(
            code(t.send(&Request::Getattr { handle: t.root })),
            ErrorCode::BadSession
        );
        t.session = saved;
        // Another address with a valid session id.
        t.peer = Peer::Udp("127.0.0.1:40001".parse().unwrap());
        assert_eq!(
            code(t.send(&Request::Getattr { handle: t.root })),
            ErrorCode::BadSession
        );
        t.peer = Peer::Udp(PEER.parse().unwrap());
        // A retransmitted hello gets the same session.
        let (h, _) = t.hello([1; 16]);
        assert_eq!(h.session, t.session);
        // max_clients.
        for i in 0..3u8 {
            let (h, r) = t.hello([10 + i; 16]);
            assert!(r.is_ok());
            assert_ne!(h.session, t.session);
        }
        assert_eq!(code(t.hello([99; 16]).1), ErrorCode::Busy);
        // Goodbye frees the slot.
        assert!(t.send(&Request::Goodbye).is_ok());
        assert!(t.hello([99; 16]).1.is_ok());
    }

    #[test]
    fn hellos_from_forged_addresses_cannot_lock_clients_out() {
        let mut t = T::with(ServiceConfig {
            max_clients: 2,
            ..config()
        });
        assert!(
            t.send(&Request::Getattr { handle: t.root }).is_ok(),
            "confirmed"
        );
        let me = t.peer;
        // A "client" that only ever says hello (its address was forged).
        t.peer = Peer::Udp("127.0.0.1:50001".parse().unwrap());
        assert!(t.hello([7; 16]).1.is_ok());
        t.peer = Peer::Udp("127.0.0.1:50002".parse().unwrap());
        assert_eq!(code(t.hello([8; 16]).1), ErrorCode::Busy);
        std::thread::sleep(UNCONFIRMED_GRACE + Duration::from_millis(100));
        assert!(t.hello([8; 16]).1.is_ok());
        // The confirmed session was not the one evicted.
        t.peer = me;
        assert!(t.send(&Request::Getattr { handle: t.root }).is_ok());
    }

    /// A client's hello and proof through `t`, from `peer`: the proof's
    /// answer.
    fn hello_and_prove(t: &mut T, peer: &str, nonce: [u8; 16]) -> OpResult<Reply<'static>> {
        t.peer = Peer::Udp(peer.parse().unwrap());
        let (h, r) = t.hello(nonce);
        let Reply::Welcome { nonce: server, .. } = r? else {
            panic!("a welcome")
        };
        t.session = h.session;
        let proof = auth::proof("s3cret", &server, &nonce, t.session);
        t.send(&Request::Auth { proof })
    }

    #[test]
    fn hellos_without_the_token_cannot_take_the_clients_slots() {
        let mut t = T::with(ServiceConfig {
            token: Some("s3cret".into()),
            max_clients: 2,
            ..config()
        });
        let flood = |t: &mut T, ip: &str, n: u16| {
            for i in 0..n {
                t.peer = Peer::Udp(format!("{ip}:{}", 20_000 + i).parse().unwrap());
                let mut nonce = [0xee; 16];
                nonce[..2].copy_from_slice(&i.to_be_bytes());
                assert!(t.hello(nonce).1.is_ok(), "the pool never refuses");
            }
        };
        // Hellos that never prove anything, from another address and from
        // the client's own (on loopback they share it).
        flood(&mut t, "127.0.0.2", 200);
        flood(&mut t, "127.0.0.1", 200);
        t.peer = Peer::Udp("127.0.0.1:41000".parse().unwrap());
        let (h, r) = t.hello([5; 16]);
        let Reply::Welcome { nonce, .. } = r.unwrap() else {
            panic!()
        };
        // More of the flood between the client's hello and its proof.
        flood(&mut t, "127.0.0.2", 50);
        flood(&mut t, "127.0.0.1", 2);
        t.peer = Peer::Udp("127.0.0.1:41000".parse().unwrap());
        t.session = h.session;
        let proof = auth::proof("s3cret", &nonce, &[5; 16], t.session);
        assert_eq!(t.send(&Request::Auth { proof }).unwrap(), Reply::Done);
        assert!(t.send(&Request::Getattr { handle: t.root }).is_ok());
        // The first session of T::with never proved; a second client
        // takes the last slot, a third is BUSY at its proof.
        assert_eq!(
            hello_and_prove(&mut t, "127.0.0.1:41001", [6; 16]).unwrap(),
            Reply::Done
        );
        assert_eq!(
            code(hello_and_prove(&mut t, "127.0.0.1:41002", [7; 16])),
            ErrorCode::Busy
        );
        let unproved = lock(&t.svc.sessions)
            .values()
            .filter(|s| !s.authenticated.load(Ordering::Acquire))
            .count();
        assert!(unproved <= 8, "the pool is bounded: {unproved}");
    }

    fn put_begin(t: &mut T, name: &str, size: u64) -> OpResult<Reply<'static>> {
        let root = t.root;
        t.send(&Request::PutBegin {
            dir: root,
            name: name.as_bytes(),
            mode: 0o644,
            size,
        })
    }

    #[test]
    fn puts_beyond_the_size_bound_or_the_free_space_are_refused_up_front() {
        let mut t = T::new();
        // config(): files up to 1 MiB.
        assert!(put_begin(&mut t, "fits", 1 << 20).is_ok());
        assert_eq!(
            code(put_begin(&mut t, "big", (1 << 20) + 1)),
            ErrorCode::TooBig
        );
        let mut t = T::with(ServiceConfig {
            max_file_size: crate::protocol::MAX_OFFSET,
            ..config()
        });
        // SAFETY: statvfs(3) fills the struct we pass.
        let free = unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            let path = std::ffi::CString::new(t.dir.path().to_str().unwrap()).unwrap();
            assert_eq!(libc::statvfs(path.as_ptr(), &mut st), 0);
            st.f_bavail as u64 * st.f_frsize as u64
        };
        let r = put_begin(&mut t, "huge", free + (64 << 30));
        assert_eq!(code(r), ErrorCode::NoSpace);
        let names: Vec<_> = std::fs::read_dir(t.dir.path()).unwrap().collect();
        assert!(
            names.is_empty(),
            "a refused upload leaves nothing: {names:?}"
        );
    }

    #[test]
    fn hashes_over_tcp_are_bounded_like_udps() {
        let t = T::new();
        std::fs::write(t.dir.path().join("f"), b"data").unwrap();
        let tcp = Peer::Tcp {
            conn: 7,
            addr: PEER.parse().unwrap(),
        };
        let call = |session: u64, xid: u64, req: &Request<'_>| {
            let mut m = Vec::new();
            encode_request(session, xid, req, &mut m).unwrap();
            let mut out = Vec::new();
            assert_eq!(
                t.svc.handle(tcp, Transport::Tcp, &m, &mut out),
                Outcome::Reply
            );
            let (h, _, r) = decode_reply(&out).unwrap();
            (h, r.map(owned))
        };
        let (h, r) = call(
            0,
            1,
            &Request::Hello {
                nonce: [3; 16],
                cookie: [0; protocol::COOKIE_LEN],
            },
        );
        assert!(r.is_ok(), "{r:?}");
        let session = h.session;
        let Ok(Reply::Handle { handle: f, .. }) = call(
            session,
            2,
            &Request::Lookup {
                dir: t.root,
                name: b"f",
            },
        )
        .1
        else {
            panic!("lookup")
        };
        // Every TCP hasher busy (as six connections hashing 64 GiB each
        // would keep them): BUSY, not a seventh whole-file read.
        t.svc.tcp_hashes.store(hasher::HASHERS, Ordering::SeqCst);
        assert_eq!(
            code(call(session, 3, &Request::Hash { file: f }).1),
            ErrorCode::Busy
        );
        t.svc
            .tcp_hashes
            .store(hasher::HASHERS - 1, Ordering::SeqCst);
        assert!(matches!(
            call(session, 4, &Request::Hash { file: f }).1,
            Ok(Reply::Hash { size: 4, .. })
        ));
        assert_eq!(
            t.svc.tcp_hashes.load(Ordering::SeqCst),
            hasher::HASHERS - 1,
            "the slot is given back"
        );
    }

    #[test]
    fn tokens_are_required_and_checked() {
        let mut c = config();
        c.token = Some("s3cret".into());
        let mut t = T::with(c);
        assert_eq!(
            code(t.send(&Request::Getattr { handle: t.root })),
            ErrorCode::Auth
        );
        // The right proof.
        let (_, r) = t.hello([1; 16]);
        let Reply::Welcome {
            nonce,
            auth_required,
            ..
        } = r.unwrap()
        else {
            panic!()
        };
        assert!(auth_required);
        let proof = auth::proof("s3cret", &nonce, &[1; 16], t.session);
        assert_eq!(t.send(&Request::Auth { proof }).unwrap(), Reply::Done);
        assert!(t.send(&Request::Getattr { handle: t.root }).is_ok());
        // A wrong proof ends the session.
        let mut t2 = T::with(ServiceConfig {
            token: Some("s3cret".into()),
            ..config()
        });
        assert_eq!(
            code(t2.send(&Request::Auth { proof: [0; 32] })),
            ErrorCode::Auth
        );
        assert_eq!(
            code(t2.send(&Request::Getattr { handle: t2.root })),
            ErrorCode::BadSession
        );
    }

    #[test]
    fn malformed_messages_get_errors_or_silence() {
        let mut t = T::new();
        // No header: silence over UDP, close over TCP.
        let mut out = Vec::new();
        assert_eq!(
            t.svc.handle(t.peer, Transport::Udp, b"garbage", &mut out),
            Outcome::Drop
        );
        let tcp = Peer::Tcp {
            conn: 1,
            addr: PEER.parse().unwrap(),
        };
        assert_eq!(
            t.svc.handle(tcp, Transport::Tcp, b"garbage", &mut out),
            Outcome::Close
        );
        assert!(out.is_empty());
        // Unknown opcode: UNSUPPORTED under that code.
        let mut m = t.message(5, &Request::Getattr { handle: t.root });
        m[3] = 0x3f;
        let reply = t.send_bytes(&m).unwrap();
        assert_eq!(reply[3], 0x3f | REPLY_BIT);
        assert_eq!(reply[protocol::HEADER_LEN], ErrorCode::Unsupported as u8);
        // Truncated body: PROTOCOL.
        let m = t.message(6, &Request::Getattr { handle: t.root });
        let r = result(&t.send_bytes(&m[..m.len() - 1]).unwrap());
        assert_eq!(code(r), ErrorCode::Protocol);
        // A reply sent to the server is dropped (UDP) or ends the
        // connection (TCP).
        let mut m = t.message(7, &Request::Getattr { handle: t.root });
        m[3] |= REPLY_BIT;
        assert!(t.send_bytes(&m).is_none());
        assert_eq!(
            t.svc.handle(tcp, Transport::Tcp, &m, &mut out),
            Outcome::Close
        );
        // Too big for UDP reads.
        let h = t.create("f");
        let r = t.send(&Request::Read {
            file: h,
            offset: 0,
            count: MAX_UDP_DATA as u32 + 1,
        });
        assert_eq!(code(r), ErrorCode::TooBig);
        // A handle from another server (epoch).
        let r = t.send(&Request::Getattr {
            handle: Handle::from_parts(1, 0),
        });
        assert_eq!(code(r), ErrorCode::Stale);
        assert!(t.svc.stats().malformed >= 4);
    }

    #[test]
    fn io_errors_map_to_codes() {
        let e = io::Error::from_raw_os_error(libc::ENOSPC);
        let r = io_error(&e, "write");
        assert_eq!(r.code, ErrorCode::NoSpace);
        assert!(r.detail.starts_with("write: "), "{}", r.detail);
        assert_eq!(
            io_error(&io::Error::from_raw_os_error(libc::EDQUOT), "w").code,
            ErrorCode::NoSpace
        );
        assert_eq!(
            io_error(&io::Error::from_raw_os_error(libc::EROFS), "w").code,
            ErrorCode::ReadOnly
        );
        assert_eq!(
            io_error(&io::Error::from_raw_os_error(libc::ELOOP), "w").code,
            ErrorCode::Access
        );
        assert_eq!(
            io_error(&io::Error::from_raw_os_error(libc::EIO), "w").code,
            ErrorCode::Io
        );
    }

    #[test]
    fn directories_are_read_in_pages() {
        let mut t = T::new();
        for i in 0..300 {
            std::fs::write(t.dir.path().join(format!("file-{i:03}")), b"").unwrap();
        }
        let mut names = Vec::new();
        let mut cookie = 0;
        let mut pages = 0;
        loop {
            pages += 1;
            match t
                .send(&Request::Readdir {
                    dir: t.root,
                    cookie,
                    max_entries: 64,
                })
                .unwrap()
            {
                Reply::Entries { eof, entries } => {
                    assert!(entries.len() <= 64);
                    if let Some(last) = entries.last() {
                        cookie = last.cookie;
                    }
                    names.extend(entries.into_iter().map(|e| e.name));
                    if eof {
                        break;
                    }
                }
                other => panic!("{other:?}"),
            }
            assert!(pages < 100);
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 300);
        assert!(pages >= 5);
    }
}
