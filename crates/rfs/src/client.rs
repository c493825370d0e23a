//! The rfs client: SOS's file system calls (open, close, read, write,
//! getdirent, stat, create) over the request pipeline of
//! [`crate::pipeline`], plus whole-file `get` and `put` with progress and
//! an end-to-end checksum.
//!
//! Reads and writes are cut into `packet`-byte requests, `window` of them
//! in flight. `read` places each reply's bytes at their offset in the
//! caller's buffer, whatever order the replies come in, and returns the
//! contiguous prefix (a short reply means end of file). `get` streams a
//! whole file: replies that arrive ahead of the next expected offset wait
//! in a reorder buffer (at most `window` packets) and bytes go to the
//! local file strictly in order, through the hash. `put` reads the local
//! file once, hashes it as it goes, and compares with the server's hash of
//! what it stored, after a commit (fsync) on the server.
//!
//! Paths are relative to the export, components separated by `/`; a
//! leading `/` means the export's root. `.` and `..` are refused here, and
//! would be refused by the server too.

use crate::auth;
use crate::error::ClientError;
use crate::pipeline::{ClientStats, Conn, Encoder, Job, Pipeline, Timing};
use crate::protocol::{
    validate_name, Attr, CreateHow, DirEntry, ErrorCode, Handle, Kind, Op, RemoteError, Reply,
    Request, Transport, COOKIE_LEN, MAX_READDIR_ENTRIES,
};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// Most requests in flight.
pub const MAX_WINDOW: usize = 256;
/// Most files open at once in one client.
pub const MAX_OPEN_FILES: usize = 1024;
/// Entries asked for per readdir.
const READDIR_PAGE: u16 = 256;
/// Longest a hello waits out address back-offs in all (less than the
/// server's hello timeout over TCP).
const BACKOFF_PATIENCE: Duration = Duration::from_secs(3);
/// Fresh address cookies a hello accepts before giving up.
const MAX_HELLO_RETRIES: u32 = 3;

/// Settings of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub transport: Transport,
    /// Requests in flight (SOS's MAX_IN_FLIGHT), 1..=256.
    pub window: usize,
    /// Bytes per read or write request, 1..=the transport's limit
    /// (65,443 over UDP, 65,536 over TCP).
    pub packet: usize,
    /// The server's token, when it has one.
    pub token: Option<String>,
    /// UDP: retransmission timeout before a round trip was measured.
    pub initial_rto: Duration,
    /// UDP: bounds of the retransmission timeout.
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// UDP: sends of one request before giving up.
    pub max_tries: u32,
    /// TCP: connect timeout and how long to wait for a reply.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            transport: Transport::Udp,
            window: 8,
            packet: 32 * 1024,
            token: None,
            initial_rto: Duration::from_millis(200),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(2),
            max_tries: 8,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ClientOptions {
    /// Check every option; the error names the option and the range.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |what, value: String, accepted: String| {
            Err(ClientError::Option {
                what,
                value,
                accepted,
            })
        };
        if self.window == 0 || self.window > MAX_WINDOW {
            return bad(
                "window",
                self.window.to_string(),
                format!("1..={MAX_WINDOW}"),
            );
        }
        check_packet(self.packet, self.transport)?;
        if self.token.as_ref().is_some_and(|t| t.is_empty()) {
            return bad("token", "\"\"".into(), "a non-empty secret".into());
        }
        if self.min_rto.is_zero() || self.min_rto > self.max_rto {
            return bad(
                "min_rto",
                format!("{:?}", self.min_rto),
                format!("more than 0 and at most max_rto ({:?})", self.max_rto),
            );
        }
        if self.initial_rto < self.min_rto || self.initial_rto > self.max_rto {
            return bad(
                "initial_rto",
                format!("{:?}", self.initial_rto),
                format!(
                    "between min_rto ({:?}) and max_rto ({:?})",
                    self.min_rto, self.max_rto
                ),
            );
        }
        if self.max_rto > Duration::from_secs(60) {
            return bad(
                "max_rto",
                format!("{:?}", self.max_rto),
                "at most 60 s".into(),
            );
        }
        if self.max_tries == 0 || self.max_tries > 100 {
            return bad("max_tries", self.max_tries.to_string(), "1..=100".into());
        }
        if self.timeout.is_zero() {
            return bad("timeout", "0".into(), "a positive duration".into());
        }
        Ok(())
    }
}

fn check_packet(packet: usize, transport: Transport) -> Result<(), ClientError> {
    if packet == 0 || packet > transport.max_data() {
        return Err(ClientError::Option {
            what: "packet",
            value: packet.to_string(),
            accepted: format!(
                "1..={} bytes over {transport}{}",
                transport.max_data(),
                if transport == Transport::Udp {
                    " (a datagram carries at most 65,507 bytes; use TCP for 64 KiB)"
                } else {
                    ""
                }
            ),
        });
    }
    Ok(())
}

/// How a file is opened (SOS: O_RDONLY, O_WRONLY, O_RDWR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Write,
    ReadWrite,
}

impl OpenMode {
    fn reads(self) -> bool {
        self != OpenMode::Write
    }

    fn writes(self) -> bool {
        self != OpenMode::Read
    }
}

/// An open file of a [`Client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fd(u32);

impl Fd {
    pub fn raw(self) -> u32 {
        self.0
    }
}

/// Progress of a whole-file transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes delivered in order (get) or acknowledged by the server (put).
    pub done: u64,
    /// The file's size when the transfer started.
    pub total: u64,
}

/// What a finished `get` or `put` moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferSummary {
    pub bytes: u64,
    pub elapsed: Duration,
    /// xxh3-128 of the bytes, equal on both sides.
    pub hash: u128,
    /// Retransmissions during the transfer.
    pub retransmissions: u64,
}

struct OpenFile {
    handle: Handle,
    path: String,
    mode: OpenMode,
    offset: u64,
}

struct DirCursor {
    dir: Handle,
    entries: Vec<DirEntry>,
    cookie: u64,
    eof: bool,
}

/// A connection to an rfs server.
pub struct Client {
    pipe: Pipeline,
    server: SocketAddr,
    transport: Transport,
    root: Handle,
    max_data: usize,
    packet: usize,
    window: usize,
    fds: HashMap<u32, OpenFile>,
    next_fd: u32,
    dir_cursor: Option<DirCursor>,
    said_goodbye: bool,
    /// How long a hello waits out an address back-off in all.
    backoff_patience: Duration,
    /// Raised from outside (Ctrl-C) to stop a `get` or `put`.
    stop: Option<&'static AtomicBool>,
}

impl Client {
    /// Connect to `server`, open a session and authenticate if needed.
    pub fn connect(server: SocketAddr, options: ClientOptions) -> Result<Client, ClientError> {
        options.validate()?;
        let connect_err = |source: io::Error, hint: &'static str| ClientError::Connect {
            server,
            transport: options.transport,
            hint,
            source,
        };
        let conn = match options.transport {
            Transport::Udp => {
                let local: SocketAddr = if server.is_ipv4() {
                    "0.0.0.0:0".parse().unwrap_or(server)
                } else {
                    "[::]:0".parse().unwrap_or(server)
                };
                let sock = UdpSocket::bind(local).map_err(|e| connect_err(e, ""))?;
                sock.connect(server).map_err(|e| connect_err(e, ""))?;
                let want = 2 * options.window * options.packet + (1 << 20);
                crate::sock::set_buffers(std::os::fd::AsRawFd::as_raw_fd(&sock), want);
                Conn::Udp(sock)
            }
            Transport::Tcp => {
                let stream = TcpStream::connect_timeout(&server, options.timeout).map_err(|e| {
                    let hint = match e.kind() {
                        io::ErrorKind::ConnectionRefused => {
                            " (is the rfs server running there, with TCP?)"
                        }
                        io::ErrorKind::TimedOut => " (host down, or a firewall drops the port?)",
                        _ => "",
                    };
                    connect_err(e, hint)
                })?;
                let _ = stream.set_nodelay(true);
                stream
                    .set_read_timeout(Some(options.timeout))
                    .and_then(|_| stream.set_write_timeout(Some(options.timeout)))
                    .map_err(|e| connect_err(e, ""))?;
                Conn::Tcp(stream)
            }
        };
        let timing = Timing {
            initial_rto: options.initial_rto,
            min_rto: options.min_rto,
            max_rto: options.max_rto,
            max_tries: options.max_tries,
            timeout: options.timeout,
        };
        let mut client = Client {
            pipe: Pipeline::new(conn, server, options.window, timing),
            server,
            transport: options.transport,
            root: Handle([0; 16]),
            max_data: options.transport.max_data(),
            packet: options.packet,
            window: options.window,
            fds: HashMap::new(),
            next_fd: 3, // 0..=2 are stdin, stdout and stderr in SOS too
            dir_cursor: None,
            said_goodbye: false,
            backoff_patience: options.timeout.min(BACKOFF_PATIENCE),
            stop: None,
        };
        client.hello(options.token.as_deref())?;
        Ok(client)
    }

    fn hello(&mut self, token: Option<&str>) -> Result<(), ClientError> {
        let client_nonce =
            auth::random_bytes::<16>().map_err(|e| ClientError::io("getting random bytes", e))?;
        let server = self.server;
        // Over UDP the first hello is answered with a cookie (the server
        // validates our address before it keeps any state); the second,
        // carrying it, opens the session. A cookie can expire on the way
        // (or the server restart), so a few retries are allowed.
        let mut cookie = [0u8; COOKIE_LEN];
        let mut retries = 0;
        let mut backed_off = Duration::ZERO;
        let (nonce, auth_required, root, max_data, drc_span) = loop {
            let answer = self.call(
                &Request::Hello {
                    nonce: client_nonce,
                    cookie,
                },
                false,
                |r| match r {
                    Ok(Reply::Welcome {
                        nonce,
                        auth_required,
                        root,
                        max_data,
                        drc_span,
                    }) => Ok(Ok((nonce, auth_required, root, max_data, drc_span))),
                    Ok(Reply::Retry { cookie }) => Ok(Err(cookie)),
                    Ok(_) => Err(unexpected(server, "hello")),
                    Err(error) => Err(remote(server, "opening a session".into(), error)),
                },
            );
            // Wrong tokens from this address (another program's, maybe):
            // wait out a short back-off, then try again.
            let answer = match answer {
                Err(ClientError::Remote { error, .. })
                    if error.code == ErrorCode::Auth
                        && crate::backoff::parse_refusal(&error.detail)
                            .is_some_and(|w| backed_off + w <= self.backoff_patience) =>
                {
                    let wait = crate::backoff::parse_refusal(&error.detail).unwrap_or_default();
                    std::thread::sleep(wait);
                    backed_off += wait;
                    continue;
                }
                other => other?,
            };
            match answer {
                Ok(welcome) => break welcome,
                Err(_) if retries == MAX_HELLO_RETRIES => {
                    return Err(ClientError::Unexpected {
                        server,
                        what: format!(
                            "the server asked for a new address cookie {} times in a row",
                            retries + 1
                        ),
                    })
                }
                Err(fresh) => {
                    cookie = fresh;
                    retries += 1;
                }
            }
        };
        self.root = root;
        self.max_data = max_data as usize;
        // Keep every retransmission inside the server's duplicate cache.
        self.pipe.set_horizon(u64::from(drc_span / 2));
        if self.packet > self.max_data {
            return Err(ClientError::Option {
                what: "packet",
                value: self.packet.to_string(),
                accepted: format!(
                    "at most {} bytes: the server's limit over {}",
                    self.max_data, self.transport
                ),
            });
        }
        if auth_required {
            let Some(token) = token else {
                return Err(ClientError::TokenRequired { server });
            };
            let proof = auth::proof(token, &nonce, &client_nonce, self.pipe.session());
            self.call(&Request::Auth { proof }, false, |r| match r {
                Ok(_) => Ok(()),
                Err(error) => Err(remote(server, "authenticating".into(), error)),
            })?;
        }
        Ok(())
    }

    /// Send one request and turn its reply into a value.
    fn call<T>(
        &mut self,
        req: &Request<'_>,
        patient: bool,
        convert: impl FnMut(Result<Reply<'_>, RemoteError>) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut job = OneShot {
            req: Some(req),
            patient,
            convert,
            out: None,
        };
        self.pipe.run(&mut job)?;
        job.out.unwrap_or_else(|| {
            Err(ClientError::Unexpected {
                server: self.server,
                what: format!("no reply was recorded for a {} request", req.op()),
            })
        })
    }

    // -- settings and state --------------------------------------------------

    /// Stop `get` and `put` when `flag` is raised (osprobe's Ctrl-C flag).
    /// The transfer stops between requests (the replies still in flight are
    /// abandoned; the pipeline ignores them if they come), removes its
    /// partial file, the local one of a `get` or the remote one of a
    /// `put`, and fails with [`ClientError::Interrupted`].
    pub fn set_stop(&mut self, flag: &'static AtomicBool) {
        self.stop = Some(flag);
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn window(&self) -> usize {
        self.window
    }

    pub fn packet(&self) -> usize {
        self.packet
    }

    /// The largest packet the server accepts on this transport.
    pub fn max_packet(&self) -> usize {
        self.max_data
    }

    /// Change the number of requests in flight (1..=256).
    pub fn set_window(&mut self, window: usize) -> Result<(), ClientError> {
        if window == 0 || window > MAX_WINDOW {
            return Err(ClientError::Option {
                what: "window",
                value: window.to_string(),
                accepted: format!("1..={MAX_WINDOW}"),
            });
        }
        self.window = window;
        self.pipe.set_window(window);
        Ok(())
    }

    /// Change the bytes per read or write request.
    pub fn set_packet(&mut self, packet: usize) -> Result<(), ClientError> {
        check_packet(packet, self.transport)?;
        if packet > self.max_data {
            return Err(ClientError::Option {
                what: "packet",
                value: packet.to_string(),
                accepted: format!("1..={} bytes (the server's limit)", self.max_data),
            });
        }
        self.packet = packet;
        Ok(())
    }

    pub fn stats(&self) -> ClientStats {
        self.pipe.stats()
    }

    // -- paths ---------------------------------------------------------------

    fn components(path: &str) -> Result<Vec<&str>, ClientError> {
        let mut parts = Vec::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            validate_name(part.as_bytes()).map_err(|e| ClientError::BadPath {
                path: path.to_string(),
                why: e.to_string(),
            })?;
            parts.push(part);
        }
        Ok(parts)
    }

    fn lookup(
        &mut self,
        dir: Handle,
        name: &str,
        path: &str,
    ) -> Result<(Handle, Attr), ClientError> {
        let server = self.server;
        self.call(
            &Request::Lookup {
                dir,
                name: name.as_bytes(),
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, attr }) => Ok((handle, attr)),
                Ok(_) => Err(unexpected(server, "lookup")),
                Err(error) => Err(remote(server, format!("looking up \"{path}\""), error)),
            },
        )
    }

    fn getattr(&mut self, handle: Handle, path: &str) -> Result<Attr, ClientError> {
        let server = self.server;
        self.call(&Request::Getattr { handle }, false, |r| match r {
            Ok(Reply::Attr(a)) => Ok(a),
            Ok(_) => Err(unexpected(server, "getattr")),
            Err(error) => Err(remote(server, format!("stat of \"{path}\""), error)),
        })
    }

    /// The handle and attributes of `path`.
    fn walk(&mut self, path: &str) -> Result<(Handle, Attr), ClientError> {
        let parts = Self::components(path)?;
        if parts.is_empty() {
            let attr = self.getattr(self.root, "/")?;
            return Ok((self.root, attr));
        }
        let mut handle = self.root;
        let mut attr = None;
        for (i, part) in parts.iter().enumerate() {
            if let Some(a) = attr {
                let a: Attr = a;
                if a.kind != Kind::Dir {
                    return Err(ClientError::BadPath {
                        path: path.to_string(),
                        why: format!(
                            "\"{}\" is a {}, not a directory",
                            parts[..i].join("/"),
                            a.kind.name()
                        ),
                    });
                }
            }
            let (h, a) = self.lookup(handle, part, path)?;
            handle = h;
            attr = Some(a);
        }
        Ok((
            handle,
            attr.unwrap_or_else(|| unreachable!("parts is not empty")),
        ))
    }

    /// The directory handle of `path`'s parent and the last name.
    fn walk_parent<'p>(&mut self, path: &'p str) -> Result<(Handle, &'p str), ClientError> {
        let parts = Self::components(path)?;
        let Some((&name, dirs)) = parts.split_last() else {
            return Err(ClientError::BadPath {
                path: path.to_string(),
                why: "it names the export's root; a file name is needed".into(),
            });
        };
        let dir = if dirs.is_empty() {
            self.root
        } else {
            let dir_path = dirs.join("/");
            let (h, a) = self.walk(&dir_path)?;
            if a.kind != Kind::Dir {
                return Err(ClientError::BadPath {
                    path: path.to_string(),
                    why: format!("\"{dir_path}\" is a {}, not a directory", a.kind.name()),
                });
            }
            h
        };
        Ok((dir, name))
    }

    fn fd_entry(&mut self, fd: Fd) -> Result<&mut OpenFile, ClientError> {
        self.fds.get_mut(&fd.0).ok_or(ClientError::BadFd {
            fd: fd.0,
            why: "is not open",
        })
    }

    fn new_fd(&mut self, file: OpenFile) -> Result<Fd, ClientError> {
        if self.fds.len() >= MAX_OPEN_FILES {
            return Err(ClientError::BadFd {
                fd: self.next_fd,
                why: "cannot be opened: too many open files (1024)",
            });
        }
        while self.fds.contains_key(&self.next_fd) {
            self.next_fd = self.next_fd.wrapping_add(1).max(3);
        }
        let fd = self.next_fd;
        self.next_fd = self.next_fd.wrapping_add(1).max(3);
        self.fds.insert(fd, file);
        Ok(Fd(fd))
    }

    // -- the SOS system calls ------------------------------------------------

    /// Open an existing regular file.
    pub fn open(&mut self, path: &str, mode: OpenMode) -> Result<Fd, ClientError> {
        let (handle, attr) = self.walk(path)?;
        if attr.kind != Kind::File {
            return Err(ClientError::BadPath {
                path: path.to_string(),
                why: format!(
                    "it is a {}; only regular files can be opened",
                    attr.kind.name()
                ),
            });
        }
        self.new_fd(OpenFile {
            handle,
            path: path.to_string(),
            mode,
            offset: 0,
        })
    }

    /// Create a regular file (`how`: fail if it exists, or truncate it) and
    /// open it for reading and writing. `mode` is the permission bits
    /// (0..=0o777).
    pub fn create(&mut self, path: &str, how: CreateHow, mode: u32) -> Result<Fd, ClientError> {
        let handle = self.create_handle(path, how, mode)?;
        self.new_fd(OpenFile {
            handle,
            path: path.to_string(),
            mode: OpenMode::ReadWrite,
            offset: 0,
        })
    }

    fn create_handle(
        &mut self,
        path: &str,
        how: CreateHow,
        mode: u32,
    ) -> Result<Handle, ClientError> {
        if mode > crate::protocol::MAX_CREATE_MODE {
            return Err(ClientError::Option {
                what: "mode",
                value: format!("{mode:#o}"),
                accepted: "permission bits 0..=0o777".into(),
            });
        }
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::Create {
                dir,
                name: name.as_bytes(),
                mode,
                how,
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, .. }) => Ok(handle),
                Ok(_) => Err(unexpected(server, "create")),
                Err(error) => Err(remote(server, format!("creating \"{path}\""), error)),
            },
        )
    }

    /// Close `fd`.
    pub fn close(&mut self, fd: Fd) -> Result<(), ClientError> {
        self.fds
            .remove(&fd.0)
            .map(|_| ())
            .ok_or(ClientError::BadFd {
                fd: fd.0,
                why: "is not open",
            })
    }

    /// Read up to `buf.len()` bytes at the file's offset, `window` packets
    /// in flight; returns the bytes read (0 at end of file) and advances the
    /// offset.
    pub fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        let offset = f.offset;
        let n = self.read_at(fd, offset, buf)?;
        self.fd_entry(fd)?.offset = offset + n as u64;
        Ok(n)
    }

    /// Read at `offset` without moving the file's offset.
    pub fn read_at(&mut self, fd: Fd, offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        if !f.mode.reads() {
            return Err(ClientError::BadFd {
                fd: fd.0,
                why: "is open for writing only",
            });
        }
        let (handle, path) = (f.handle, f.path.clone());
        let mut job = ReadInto {
            handle,
            base: offset,
            buf,
            packet: self.packet,
            next: 0,
            limit: 0,
            short: None,
            asked: HashMap::new(),
            server: self.server,
            path: &path,
        };
        job.limit = job.buf.len();
        self.pipe.run(&mut job)?;
        Ok(job.short.unwrap_or(job.limit).min(job.buf.len()))
    }

    /// Write `data` at the file's offset, `window` packets in flight;
    /// returns `data.len()` and advances the offset.
    pub fn write(&mut self, fd: Fd, data: &[u8]) -> Result<usize, ClientError> {
        let offset = self.fd_entry(fd)?.offset;
        let n = self.write_at(fd, offset, data)?;
        self.fd_entry(fd)?.offset = offset + n as u64;
        Ok(n)
    }

    /// Write at `offset` without moving the file's offset.
    pub fn write_at(&mut self, fd: Fd, offset: u64, data: &[u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        if !f.mode.writes() {
            return Err(ClientError::BadFd {
                fd: fd.0,
                why: "is open for reading only",
            });
        }
        let (handle, path) = (f.handle, f.path.clone());
        let mut source: &[u8] = data;
        let mut job = WriteFrom::new(handle, offset, &mut source, self.packet, self.server, &path);
        self.pipe.run(&mut job)?;
        Ok(job.acked as usize)
    }

    /// Move the file's offset.
    pub fn seek(&mut self, fd: Fd, offset: u64) -> Result<(), ClientError> {
        self.fd_entry(fd)?.offset = offset;
        Ok(())
    }

    /// Attributes of an open file.
    pub fn fstat(&mut self, fd: Fd) -> Result<Attr, ClientError> {
        let f = self.fd_entry(fd)?;
        let (handle, path) = (f.handle, f.path.clone());
        self.getattr(handle, &path)
    }

    /// Flush an open file to the server's disk (fsync there).
    pub fn sync(&mut self, fd: Fd) -> Result<(), ClientError> {
        let f = self.fd_entry(fd)?;
        let (handle, path) = (f.handle, f.path.clone());
        self.commit(handle, &path)
    }

    fn commit(&mut self, file: Handle, path: &str) -> Result<(), ClientError> {
        let server = self.server;
        self.call(&Request::Commit { file }, true, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(server, format!("committing \"{path}\""), error)),
        })
    }

    /// Attributes of `path`.
    pub fn stat(&mut self, path: &str) -> Result<Attr, ClientError> {
        Ok(self.walk(path)?.1)
    }

    /// The `index`-th entry of directory `dir` (SOS getdirent), or None
    /// past the end. Reading entries in order costs one readdir per page.
    pub fn getdirent(&mut self, dir: &str, index: usize) -> Result<Option<DirEntry>, ClientError> {
        let (handle, attr) = self.walk(dir)?;
        if attr.kind != Kind::Dir {
            return Err(ClientError::BadPath {
                path: dir.to_string(),
                why: format!("it is a {}, not a directory", attr.kind.name()),
            });
        }
        let fresh = match &self.dir_cursor {
            Some(c) => {
                c.dir != handle || index == 0 || index < c.entries.len().saturating_sub(4096)
            }
            None => true,
        };
        if fresh {
            self.dir_cursor = Some(DirCursor {
                dir: handle,
                entries: Vec::new(),
                cookie: 0,
                eof: false,
            });
        }
        loop {
            let Some(c) = &self.dir_cursor else {
                return Ok(None);
            };
            if let Some(e) = c.entries.get(index) {
                return Ok(Some(e.clone()));
            }
            if c.eof {
                return Ok(None);
            }
            let (cookie, dir_handle) = (c.cookie, c.dir);
            let (eof, entries) = self.readdir_page(dir_handle, cookie, dir)?;
            check_progress(self.server, dir, cookie, eof, &entries)?;
            if let Some(c) = &mut self.dir_cursor {
                if let Some(last) = entries.last() {
                    c.cookie = last.cookie;
                }
                c.eof = eof || entries.is_empty();
                c.entries.extend(entries);
            }
        }
    }

    fn readdir_page(
        &mut self,
        dir: Handle,
        cookie: u64,
        path: &str,
    ) -> Result<(bool, Vec<DirEntry>), ClientError> {
        let server = self.server;
        self.call(
            &Request::Readdir {
                dir,
                cookie,
                max_entries: READDIR_PAGE.min(MAX_READDIR_ENTRIES),
            },
            false,
            |r| match r {
                Ok(Reply::Entries { eof, entries }) => Ok((eof, entries)),
                Ok(_) => Err(unexpected(server, "readdir")),
                Err(error) => Err(remote(server, format!("listing \"{path}\""), error)),
            },
        )
    }

    /// Every entry of directory `dir`, in the server's order.
    pub fn readdir(&mut self, dir: &str) -> Result<Vec<DirEntry>, ClientError> {
        let (handle, attr) = self.walk(dir)?;
        if attr.kind != Kind::Dir {
            return Err(ClientError::BadPath {
                path: dir.to_string(),
                why: format!("it is a {}, not a directory", attr.kind.name()),
            });
        }
        let mut all = Vec::new();
        let mut cookie = 0;
        loop {
            let (eof, entries) = self.readdir_page(handle, cookie, dir)?;
            check_progress(self.server, dir, cookie, eof, &entries)?;
            let Some(last) = entries.last() else {
                return Ok(all);
            };
            cookie = last.cookie;
            all.extend(entries);
            if eof {
                return Ok(all);
            }
        }
    }

    /// Remove a file or an empty directory.
    pub fn remove(&mut self, path: &str) -> Result<(), ClientError> {
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::Remove {
                dir,
                name: name.as_bytes(),
            },
            false,
            |r| match r {
                Ok(_) => Ok(()),
                Err(error) => Err(remote(server, format!("removing \"{path}\""), error)),
            },
        )
    }

    /// The server's size and xxh3-128 of `path`.
    pub fn remote_hash(&mut self, path: &str) -> Result<(u64, u128), ClientError> {
        let (handle, _) = self.walk(path)?;
        self.hash_handle(handle, path)
    }

    fn hash_handle(&mut self, file: Handle, path: &str) -> Result<(u64, u128), ClientError> {
        let server = self.server;
        self.call(&Request::Hash { file }, true, |r| match r {
            Ok(Reply::Hash { size, hash }) => Ok((size, u128::from_be_bytes(hash))),
            Ok(_) => Err(unexpected(server, "hash")),
            Err(error) => Err(remote(server, format!("hashing \"{path}\""), error)),
        })
    }

    // -- whole files ---------------------------------------------------------

    /// Copy the remote file `remote` to the local path `local` (written
    /// under a temporary name and renamed when complete and verified).
    pub fn get(
        &mut self,
        remote_path: &str,
        local: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<TransferSummary, ClientError> {
        let started = Instant::now();
        let retrans0 = self.pipe.stats().retransmissions;
        let (handle, attr) = self.walk(remote_path)?;
        if attr.kind != Kind::File {
            return Err(ClientError::BadPath {
                path: remote_path.to_string(),
                why: format!(
                    "it is a {}; only regular files can be copied",
                    attr.kind.name()
                ),
            });
        }
        let (tmp, mut file) = create_partial(local)?;
        let result = self.get_into(handle, remote_path, attr.size, &mut file, &tmp, progress);
        let outcome = result.and_then(|(bytes, hash)| {
            // The one commit policy (osprobe_core::sys::commit): fsync, rename,
            // fsync of the directory. A get replaces the local file, as cp does.
            use osprobe_core::sys::CommitError;
            let rename_failed = |source| {
                let what = format!("cannot rename {} to {}", tmp.display(), local.display());
                ClientError::io(what, source)
            };
            osprobe_core::sys::commit_file(&file, &tmp, local, true).map_err(|e| match e {
                CommitError::Flush { source, .. } => {
                    ClientError::io(format!("cannot flush {}", tmp.display()), source)
                }
                CommitError::Rename { source, .. } => rename_failed(source),
                CommitError::AlreadyExists { .. } => {
                    rename_failed(io::Error::from(io::ErrorKind::AlreadyExists))
                }
                CommitError::SyncDir { dir, source } => ClientError::io(
                    format!("flushing directory {} to disk", dir.display()),
                    source,
                ),
            })?;
            Ok((bytes, hash))
        });
        match outcome {
            Ok((bytes, hash)) => Ok(TransferSummary {
                bytes,
                elapsed: started.elapsed(),
                hash,
                retransmissions: self.pipe.stats().retransmissions - retrans0,
            }),
            Err(e) => {
                let removed = std::fs::remove_file(&tmp);
                Err(match e {
                    ClientError::Interrupted { .. } => ClientError::Interrupted {
                        cleanup: match removed {
                            Ok(()) => format!("the partial file {} was removed", tmp.display()),
                            Err(why) => {
                                format!("the partial file {} is left: {why}", tmp.display())
                            }
                        },
                    },
                    other => other,
                })
            }
        }
    }

    fn get_into(
        &mut self,
        handle: Handle,
        remote_path: &str,
        size: u64,
        file: &mut File,
        tmp: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(u64, u128), ClientError> {
        let mut hasher = Xxh3::new();
        let mut sink = |bytes: &[u8]| -> Result<(), ClientError> {
            hasher.update(bytes);
            file.write_all(bytes)
                .map_err(|e| ClientError::io(format!("cannot write {}", tmp.display()), e))
        };
        let mut job = ReadStream {
            handle,
            next: 0,
            limit: size.max(1),
            end: None,
            total: size,
            packet: self.packet as u64,
            delivered: 0,
            pending: BTreeMap::new(),
            asked: HashMap::new(),
            sink: &mut sink,
            progress,
            server: self.server,
            path: remote_path,
            stop: self.stop,
        };
        self.pipe.run(&mut job)?;
        let delivered = job.delivered;
        let local_hash = hasher.digest128();
        let (remote_size, remote_hash) = self.hash_handle(handle, remote_path)?;
        if remote_size != delivered || remote_hash != local_hash {
            return Err(ClientError::ChecksumMismatch {
                remote: remote_path.to_string(),
                local_size: delivered,
                local_hash,
                remote_size,
                remote_hash,
            });
        }
        Ok((delivered, local_hash))
    }

    /// Copy the local file `local` to `remote`, atomically: the bytes go
    /// to a temporary file the server creates beside `remote`, which is
    /// hashed, compared and only then renamed over `remote`. If the put
    /// fails or is interrupted (or the client dies), `remote` keeps its
    /// old contents and the server removes the temporary file.
    pub fn put(
        &mut self,
        local: &Path,
        remote_path: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<TransferSummary, ClientError> {
        let started = Instant::now();
        let retrans0 = self.pipe.stats().retransmissions;
        let mut file = File::open(local)
            .map_err(|e| ClientError::io(format!("cannot open {}", local.display()), e))?;
        let meta = file
            .metadata()
            .map_err(|e| ClientError::io(format!("cannot stat {}", local.display()), e))?;
        if !meta.is_file() {
            return Err(ClientError::io(
                format!("cannot send {}", local.display()),
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        let mode = meta.permissions().mode() & crate::protocol::MAX_CREATE_MODE;
        let upload = self.put_begin(remote_path, mode)?;
        let mut hasher = Xxh3::new();
        let mut reader = HashingReader {
            inner: &mut file,
            hasher: &mut hasher,
        };
        let mut job = WriteFrom::new(
            upload,
            0,
            &mut reader,
            self.packet,
            self.server,
            remote_path,
        );
        job.total = meta.len();
        job.progress = Some(progress);
        job.source_name = local.display().to_string();
        job.stop = self.stop;
        let ran = self.pipe.run(&mut job);
        let sent = job.acked;
        let local_hash = hasher.digest128();
        let result = ran.and_then(|()| {
            let (remote_size, remote_hash) = self.hash_handle(upload, remote_path)?;
            if remote_size != sent || remote_hash != local_hash {
                return Err(ClientError::ChecksumMismatch {
                    remote: remote_path.to_string(),
                    local_size: sent,
                    local_hash,
                    remote_size,
                    remote_hash,
                });
            }
            self.put_end(Request::PutCommit { upload }, remote_path)?;
            Ok(TransferSummary {
                bytes: sent,
                elapsed: started.elapsed(),
                hash: local_hash,
                retransmissions: self.pipe.stats().retransmissions - retrans0,
            })
        });
        result.map_err(|e| {
            // A failed commit has discarded the upload on the server
            // already; otherwise discard it now. If the connection is
            // gone, the server discards it when the session ends.
            let discarded = self.put_end(Request::PutAbort { upload }, remote_path);
            match e {
                ClientError::Interrupted { .. } => ClientError::Interrupted {
                    cleanup: match discarded {
                        Ok(()) => format!(
                            "\"{remote_path}\" on the server is unchanged and the partial upload was discarded"
                        ),
                        Err(why) => format!(
                            "\"{remote_path}\" on the server is unchanged; the partial upload goes when the session ends ({why})"
                        ),
                    },
                },
                other => other,
            }
        })
    }

    /// Start an upload of `path`: the handle of the server's temporary file.
    fn put_begin(&mut self, path: &str, mode: u32) -> Result<Handle, ClientError> {
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::PutBegin {
                dir,
                name: name.as_bytes(),
                mode,
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, .. }) => Ok(handle),
                Ok(_) => Err(unexpected(server, "put-begin")),
                // A server older than atomic puts knows no such operation.
                Err(error) if error.code == ErrorCode::Unsupported => Err(ClientError::OldServer {
                    server,
                    op: Op::PutBegin,
                }),
                Err(error) => Err(remote(
                    server,
                    format!("starting the upload of \"{path}\""),
                    error,
                )),
            },
        )
    }

    /// Send `PutCommit` or `PutAbort` for an upload of `path`.
    fn put_end(&mut self, req: Request<'_>, path: &str) -> Result<(), ClientError> {
        let server = self.server;
        let doing = match req {
            Request::PutCommit { .. } => "committing",
            _ => "discarding",
        };
        self.call(&req, true, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(
                server,
                format!("{doing} the upload of \"{path}\""),
                error,
            )),
        })
    }

    /// A scratch file on the server beside `near` (which it never
    /// touches), open for reading and writing, that no other client can
    /// collide with: an upload that is never committed. It is removed by
    /// [`Client::discard`], or by the server when the session ends, however
    /// the client ends (a kill -9 included).
    pub fn create_scratch(&mut self, near: &str) -> Result<Fd, ClientError> {
        let handle = self.put_begin(near, 0o600)?;
        self.new_fd(OpenFile {
            handle,
            path: format!("{near} (scratch)"),
            mode: OpenMode::ReadWrite,
            offset: 0,
        })
    }

    /// Close the scratch file `fd` and remove it from the server.
    pub fn discard(&mut self, fd: Fd) -> Result<(), ClientError> {
        let f = self.fd_entry(fd)?;
        let (upload, path) = (f.handle, f.path.clone());
        self.fds.remove(&fd.0);
        self.put_end(Request::PutAbort { upload }, &path)
    }

    /// End the session on the server (it also ends when the client is
    /// dropped: a goodbye is sent without waiting for the answer).
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        self.said_goodbye = true;
        let server = self.server;
        self.call(&Request::Goodbye, false, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(server, "ending the session".into(), error)),
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.said_goodbye && self.pipe.is_udp() {
            self.pipe.send_once(&Request::Goodbye);
        }
    }
}

/// A readdir page that is not the last must move the cookie forward, or a
/// listing would never end.
fn check_progress(
    server: SocketAddr,
    dir: &str,
    cookie: u64,
    eof: bool,
    entries: &[DirEntry],
) -> Result<(), ClientError> {
    let stuck = match entries.last() {
        None => false, // an empty page ends the listing
        Some(last) => !eof && (last.cookie == cookie || last.cookie == 0),
    };
    if stuck {
        return Err(ClientError::Unexpected {
            server,
            what: format!(
                "listing \"{dir}\": the directory cookie does not advance (stuck at {cookie})"
            ),
        });
    }
    Ok(())
}

/// The partial file of a `get` into `local`: beside it (so the final
/// rename stays on one file system), under a random name, created
/// exclusively and never through a symbolic link, readable by the owner
/// only until it is complete. A name planted in advance (a link to a
/// file the user can write) is never opened.
fn create_partial(local: &Path) -> Result<(PathBuf, File), ClientError> {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download".into());
    let mut tries = 0;
    loop {
        let tag = u64::from_ne_bytes(
            auth::random_bytes::<8>().map_err(|e| ClientError::io("getting random bytes", e))?,
        );
        let tmp = local.with_file_name(format!(".{name}.osprobe-get-{tag:016x}"));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp);
        match opened {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 4 => tries += 1,
            Err(e) => {
                return Err(ClientError::io(
                    format!("cannot create {}", tmp.display()),
                    e,
                ))
            }
        }
    }
}

fn remote(server: SocketAddr, context: String, mut error: RemoteError) -> ClientError {
    if error.code == ErrorCode::BadSession && !error.detail.contains("restarted") {
        // The server cuts its replies to addresses it does not know (to
        // the size of the request), so the detail may be short.
        error.detail = format!(
            "{} (the server restarted or ended the session: connect again)",
            error.detail
        );
    }
    ClientError::Remote {
        server,
        context,
        error,
    }
}

fn unexpected(server: SocketAddr, op: &str) -> ClientError {
    ClientError::Unexpected {
        server,
        what: format!("a reply of the wrong kind to a {op} request"),
    }
}

// -- jobs ----------------------------------------------------------------------

struct OneShot<'r, F, T> {
    req: Option<&'r Request<'r>>,
    patient: bool,
    convert: F,
    out: Option<Result<T, ClientError>>,
}

impl<F, T> Job for OneShot<'_, F, T>
where
    F: FnMut(Result<Reply<'_>, RemoteError>) -> Result<T, ClientError>,
{
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        let Some(req) = self.req.take() else {
            return Ok(None);
        };
        enc.request(req)?;
        if self.patient {
            enc.patient();
        }
        Ok(Some(0))
    }

    fn reply(
        &mut self,
        _tag: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        self.out = Some((self.convert)(result));
        Ok(())
    }
}

/// `read`: replies placed at their offsets in the caller's buffer.
struct ReadInto<'a> {
    handle: Handle,
    base: u64,
    buf: &'a mut [u8],
    packet: usize,
    /// Next position in `buf` to ask for.
    next: usize,
    /// Do not ask at or beyond this position (shrinks at end of file).
    limit: usize,
    /// Lowest position where a reply came back short.
    short: Option<usize>,
    /// Length asked for by each request in flight, by position.
    asked: HashMap<u64, usize>,
    server: SocketAddr,
    path: &'a str,
}

impl Job for ReadInto<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        if self.next >= self.limit {
            return Ok(None);
        }
        let len = self.packet.min(self.limit - self.next);
        enc.request(&Request::Read {
            file: self.handle,
            offset: self.base + self.next as u64,
            count: len as u32,
        })?;
        let tag = self.next as u64;
        self.asked.insert(tag, len);
        self.next += len;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        tag: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let pos = tag as usize;
        let asked = self.asked.remove(&tag).unwrap_or(0);
        match result {
            Ok(Reply::Data { data, .. }) => {
                let n = data.len().min(asked);
                self.buf[pos..pos + n].copy_from_slice(&data[..n]);
                if n < asked {
                    let end = pos + n;
                    self.short = Some(self.short.map_or(end, |s| s.min(end)));
                    self.limit = self.limit.min(end);
                }
                Ok(())
            }
            Ok(_) => Err(unexpected(self.server, "read")),
            Err(error) => Err(remote(
                self.server,
                format!("reading \"{}\" at offset {}", self.path, self.base + tag),
                error,
            )),
        }
    }
}

/// `get`: a whole file streamed in order to a sink.
struct ReadStream<'a> {
    handle: Handle,
    next: u64,
    /// Ask up to here: the size when the transfer started (a reply that
    /// reports another size stops the transfer).
    limit: u64,
    /// End of file, once a reply showed it.
    end: Option<u64>,
    total: u64,
    packet: u64,
    delivered: u64,
    /// Replies that arrived ahead of `delivered`, at most a window of them.
    pending: BTreeMap<u64, Vec<u8>>,
    /// Length asked for by each request in flight, by offset.
    asked: HashMap<u64, u64>,
    sink: &'a mut dyn FnMut(&[u8]) -> Result<(), ClientError>,
    progress: &'a mut dyn FnMut(Progress),
    server: SocketAddr,
    path: &'a str,
    stop: Option<&'a AtomicBool>,
}

impl ReadStream<'_> {
    fn deliver(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        (self.sink)(bytes)?;
        self.delivered += bytes.len() as u64;
        (self.progress)(Progress {
            done: self.delivered,
            total: self.total,
        });
        Ok(())
    }
}

/// Whether `stop` was raised: as an error, so that the job ends between
/// requests (the caller fills in what became of the partial file).
fn check_stop(stop: Option<&AtomicBool>) -> Result<(), ClientError> {
    match stop {
        Some(flag) if flag.load(Ordering::Relaxed) => Err(ClientError::Interrupted {
            cleanup: String::new(),
        }),
        _ => Ok(()),
    }
}

impl Job for ReadStream<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        check_stop(self.stop)?;
        let stop = self.end.map_or(self.limit, |e| e.min(self.limit));
        if self.next >= stop {
            return Ok(None);
        }
        let len = self.packet.min(stop - self.next);
        enc.request(&Request::Read {
            file: self.handle,
            offset: self.next,
            count: len as u32,
        })?;
        let tag = self.next;
        self.asked.insert(tag, len);
        self.next += len;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        offset: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let asked = self.asked.remove(&offset).unwrap_or(0);
        let (size, eof, data) = match result {
            Ok(Reply::Data { size, eof, data }) => (size, eof, data),
            Ok(_) => return Err(unexpected(self.server, "read")),
            Err(error) => {
                return Err(remote(
                    self.server,
                    format!("reading \"{}\" at offset {offset}", self.path),
                    error,
                ))
            }
        };
        let got = (data.len() as u64).min(asked);
        if eof || got < asked {
            let end = offset + got;
            self.end = Some(self.end.map_or(end, |e| e.min(end)));
        }
        if size != self.total {
            // Written while we read: what arrived is a mix of versions.
            return Err(ClientError::SizeChanged {
                remote: self.path.to_string(),
                was: self.total,
                now: size,
            });
        }
        let end = self.end.unwrap_or(u64::MAX);
        if offset >= end || data.is_empty() {
            return self.drain(end);
        }
        let keep = (end - offset).min(got) as usize;
        if offset == self.delivered {
            self.deliver(&data[..keep])?;
        } else if offset > self.delivered {
            self.pending.insert(offset, data[..keep].to_vec());
        }
        self.drain(end)
    }
}

impl ReadStream<'_> {
    /// Deliver the pending replies that are next in order, up to `end`.
    fn drain(&mut self, end: u64) -> Result<(), ClientError> {
        while self.delivered < end {
            let Some(bytes) = self.pending.remove(&self.delivered) else {
                break;
            };
            let keep = (end - self.delivered).min(bytes.len() as u64) as usize;
            self.deliver(&bytes[..keep])?;
        }
        self.pending.retain(|&o, _| o < end);
        Ok(())
    }
}

/// A reader that hashes what it reads.
struct HashingReader<'a> {
    inner: &'a mut File,
    hasher: &'a mut Xxh3,
}

impl Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// `write` and `put`: chunks of a reader written at increasing offsets.
struct WriteFrom<'a> {
    handle: Handle,
    next: u64,
    source: &'a mut dyn Read,
    source_done: bool,
    /// What the source is, for errors ("the data", a local file).
    source_name: String,
    chunk: Vec<u8>,
    packet: usize,
    /// Length of each request in flight, by offset.
    in_flight: HashMap<u64, usize>,
    acked: u64,
    total: u64,
    progress: Option<&'a mut dyn FnMut(Progress)>,
    server: SocketAddr,
    path: &'a str,
    stop: Option<&'a AtomicBool>,
}

impl<'a> WriteFrom<'a> {
    fn new(
        handle: Handle,
        offset: u64,
        source: &'a mut dyn Read,
        packet: usize,
        server: SocketAddr,
        path: &'a str,
    ) -> WriteFrom<'a> {
        WriteFrom {
            handle,
            next: offset,
            source,
            source_done: false,
            source_name: "the data".into(),
            chunk: vec![0u8; packet],
            packet,
            in_flight: HashMap::new(),
            acked: 0,
            total: 0,
            progress: None,
            server,
            path,
            stop: None,
        }
    }

    /// Fill `chunk` from the source; the bytes read.
    fn fill(&mut self) -> Result<usize, ClientError> {
        let mut n = 0;
        while n < self.packet {
            match self.source.read(&mut self.chunk[n..self.packet]) {
                Ok(0) => {
                    self.source_done = true;
                    break;
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(ClientError::io(
                        format!("cannot read {} for \"{}\"", self.source_name, self.path),
                        e,
                    ))
                }
            }
        }
        Ok(n)
    }
}

impl Job for WriteFrom<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        check_stop(self.stop)?;
        if self.source_done {
            return Ok(None);
        }
        let n = self.fill()?;
        if n == 0 {
            return Ok(None);
        }
        enc.request(&Request::Write {
            file: self.handle,
            offset: self.next,
            data: &self.chunk[..n],
        })?;
        let tag = self.next;
        self.in_flight.insert(tag, n);
        self.next += n as u64;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        offset: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let asked = self.in_flight.remove(&offset).unwrap_or(0);
        match result {
            Ok(Reply::Written { count, .. }) if count as usize == asked => {
                self.acked += count as u64;
                if let Some(p) = &mut self.progress {
                    p(Progress {
                        done: self.acked,
                        total: self.total,
                    });
                }
                Ok(())
            }
            Ok(Reply::Written { count, .. }) => Err(ClientError::Unexpected {
                server: self.server,
                what: format!(
                    "the server wrote {count} of {asked} bytes at offset {offset} of \"{}\"",
                    self.path
                ),
            }),
            Ok(_) => Err(unexpected(self.server, "write")),
            Err(error) => Err(remote(
                self.server,
                format!("writing \"{}\" at offset {offset}", self.path),
                error,
            )),
        }
    }
}
