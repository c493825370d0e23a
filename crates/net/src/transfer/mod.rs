//! File transfer over an already-connected TCP stream: the mechanics of
//! `net.transfer.{file_size,packet_size,connections}` and of
//! `osprobe send FILE --to HOST` / `osprobe serve --dir DIR`.
//!
//! # What is measured (the file-transfer lab report)
//!
//! The sender's rate Tx is the file size over the sender's elapsed time,
//! from its first read of the file to the return of its last write to the
//! socket; the receiver's rate Rx is the same size over the receiver's
//! elapsed time, from the first read that returned data to the return of
//! the last write to the file. Neither clock covers the other side, and the
//! traps follow from that:
//! - A write to a socket returns when the bytes are queued in the send
//!   buffer, not when they arrived. For files smaller than the send buffer
//!   (megabytes, once autotuned) Tx measures copying into the kernel, not
//!   the network, and can exceed the link.
//! - The receiver's clock starts when its first read returns, by which time
//!   a whole socket buffer may already be waiting. For small files Rx then
//!   measures little more than writing the file: this, and the sender's
//!   clock including its first (cold) read of the file, explain the lab report's
//!   "Tx 17, Rx 431 bits/us for 1 KB" better than disk seeks do.
//! - The received file is written into the page cache; its `fsync` happens
//!   in [`commit`], outside the timed span, as the lab report's write() did.
//!
//! # Methods
//!
//! [`SendMethod::Packets`] is the lab report's program: read() the file in
//! `packet`-byte pieces and write() each piece whole, hashing it between the
//! two. The packet size is the application's, not TCP's: the kernel cuts
//! the byte stream into segments of its own. [`SendMethod::Sendfile`] hands
//! the file to the kernel with sendfile(2) in large chunks: the bytes go
//! from the page cache to the socket without entering user space, which is
//! what `osprobe send` wants for its rate.
//!
//! # Integrity
//!
//! Both sides hash the content with xxh3-128 (fast enough not to limit a
//! transfer; it detects corruption, not tampering: the control connection
//! is authenticated, see [`crate::auth`]). The receiver hashes while it
//! writes. The Packets sender hashes while it reads. With Sendfile the data
//! never passes through user space, so the sender hashes in a second pass
//! *after* the transfer, reading the file again from the page cache that
//! sendfile has just filled. After, not before: a pass before the transfer
//! would read a cold file from disk before the first byte is sent, whereas
//! after it the disk read overlaps the network and the hash pass runs at
//! memory speed. The hash pass is not part of the timed span. Either way a
//! file modified during the transfer yields a hash that does not match what
//! was received, so [`commit`] refuses it rather than keeping a mix.
//!
//! # Receiving safely
//!
//! A peer names the file; [`confine`] accepts only a plain file name inside
//! the server's directory. Data goes to a new hidden file
//! `.NAME.osprobe-partial-<random>` created exclusively (O_EXCL never
//! follows a symbolic link) beside the destination, and becomes the
//! destination only in [`commit`], when the hashes match: fsync, then an
//! atomic rename that does not replace an existing file unless allowed
//! (renameat2 RENAME_NOREPLACE), then fsync of the directory. A partial file
//! is removed on every error and when its [`RxReport`] is dropped without a
//! commit, so a failed or hostile transfer leaves nothing behind.
//!
//! # Blocking, timeouts and stopping
//!
//! Reads and writes block, but never for long: a short SO_RCVTIMEO or
//! SO_SNDTIMEO (set for the transfer, the caller's value restored after)
//! wakes them every [`POLL_SLICE`] to look at the stop flag (the caller's
//! flag and [`osprobe_core::interrupt::requested`]) and at the idle limit.
//! The stream must be in blocking mode. Writing to a connection the peer
//! has closed gives EPIPE; Rust programs ignore SIGPIPE, so it arrives as an
//! error, not as a signal.

use osprobe_core::random::SplitMix64;
use osprobe_core::scratch;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// The largest application packet (read or write size) accepted.
pub const MAX_PACKET: usize = 16 * 1024 * 1024;
/// How long a blocked read or write waits before looking at the stop flag.
pub const POLL_SLICE: Duration = Duration::from_millis(200);
/// How long a sender waits for the peer to accept more bytes before giving
/// up, unless the caller set a write timeout on the stream (that one is
/// used instead).
pub const DEFAULT_SEND_IDLE_LIMIT: Duration = Duration::from_secs(60);
/// The longest file name accepted (NAME_MAX of Linux file systems).
pub const MAX_NAME_BYTES: usize = 255;

/// Bytes per sendfile(2) call: large enough that the system-call cost
/// vanishes, small enough to report progress and look at the stop flag.
const SENDFILE_CHUNK: usize = 4 * 1024 * 1024;
/// Buffer of the hash passes and of [`create_source_file`].
const BULK_CHUNK: usize = 1024 * 1024;
/// The progress callback is called after at least this many new bytes
/// (and once at the end), not after every 30-byte packet.
const PROGRESS_STEP: u64 = 256 * 1024;
/// What marks a partial file; see [`receive_file`].
const PARTIAL_MARK: &str = ".osprobe-partial-";
/// How much of a hostile name an error message shows.
const MAX_PRINTED_CHARS: usize = 80;

/// How the sender moves the file into the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendMethod {
    /// read() `packet` bytes, write() them: the lab report's program.
    Packets,
    /// sendfile(2) in large chunks; the packet size does not apply.
    Sendfile,
}

impl SendMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SendMethod::Packets => "packets",
            SendMethod::Sendfile => "sendfile",
        }
    }
}

/// What the sender measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TxReport {
    /// Bytes sent: the file's size when it was opened.
    pub bytes: u64,
    /// First read of the file to the return of the last write (Packets) or
    /// sendfile call (Sendfile). Excludes opening the file and, for
    /// Sendfile, the hash pass.
    pub elapsed: Duration,
    /// xxh3-128 of the bytes sent, 32 lowercase hex digits.
    pub hash: String,
    pub method: SendMethod,
}

impl TxReport {
    /// Tx as the lab report defines it: size over the sender's elapsed time.
    /// `None` when nothing was timed (an empty file).
    pub fn rate_bytes_per_second(&self) -> Option<f64> {
        rate(self.bytes, self.elapsed)
    }
}

/// What the receiver measured; owns the partial file until [`commit`] or
/// [`discard`]. Dropping it without a commit removes the partial file.
#[derive(Debug)]
pub struct RxReport {
    /// Bytes received and written: always the expected count.
    pub bytes: u64,
    /// First read that returned data to the return of the last write to
    /// the file (page cache; the fsync is in [`commit`]).
    pub elapsed: Duration,
    /// xxh3-128 of the bytes received, 32 lowercase hex digits.
    pub hash: String,
    /// Where the bytes are until [`commit`] renames them.
    pub partial_path: PathBuf,
    partial: Partial,
}

impl RxReport {
    /// Rx as the lab report defines it: size over the receiver's elapsed time.
    /// `None` when nothing was timed (an empty file).
    pub fn rate_bytes_per_second(&self) -> Option<f64> {
        rate(self.bytes, self.elapsed)
    }
}

fn rate(bytes: u64, elapsed: Duration) -> Option<f64> {
    let seconds = elapsed.as_secs_f64();
    (bytes > 0 && seconds > 0.0).then(|| bytes as f64 / seconds)
}

/// Why a transfer failed. Messages are meant for the users on both ends.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "no space left on the file system holding {} (disk full or quota exceeded)",
        dir.display()
    )]
    DiskFull { dir: PathBuf },
    #[error(
        "not enough free space in {}: {needed} bytes needed, {available} available",
        dir.display()
    )]
    NotEnoughSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("refused file name \"{name}\": {why}")]
    BadName { name: String, why: String },
    #[error("packet size {packet} is not accepted: use 1 to {MAX_PACKET} bytes")]
    BadPacketSize { packet: usize },
    #[error(
        "the connection ended after {got} of the {expected} announced bytes \
         (the sender stopped or the connection broke)"
    )]
    Truncated { expected: u64, got: u64 },
    #[error("the peer sent more than the {expected} announced bytes")]
    TooLong { expected: u64 },
    #[error(
        "the content hash does not match: the sender's is {expected}, the received \
         bytes hash to {got}; the received file was discarded"
    )]
    HashMismatch { expected: String, got: String },
    #[error("{} already exists and overwriting was not allowed", path.display())]
    AlreadyExists { path: PathBuf },
    #[error("the transfer was stopped on request")]
    Interrupted,
    #[error("no progress for {after:?}: the peer stopped sending or reading")]
    TimedOut { after: Duration },
}

fn io_error(context: impl Into<String>, source: io::Error) -> TransferError {
    TransferError::Io {
        context: context.into(),
        source,
    }
}

/// An error writing into `dir`: disk full and quota errors get their own
/// variant, because the user's remedy differs.
fn storage_error(source: io::Error, dir: &Path, context: impl Into<String>) -> TransferError {
    match source.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => TransferError::DiskFull {
            dir: dir.to_path_buf(),
        },
        _ => io_error(context, source),
    }
}

fn hex(hasher: &Xxh3) -> String {
    format!("{:032x}", hasher.digest128())
}

/// xxh3-128 of a file's contents, as 32 lowercase hex digits: the hash
/// [`send_file`] and [`receive_file`] report.
pub fn hash_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path).map_err(|e| with_path(e, "cannot open", path))?;
    let mut hasher = Box::new(Xxh3::new());
    let mut buf = crate::sock::PageAligned::zeroed(BULK_CHUNK);
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(with_path(e, "cannot read", path)),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher))
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn stop_requested(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || osprobe_core::interrupt::requested()
}

fn check_packet(packet: usize) -> Result<(), TransferError> {
    if packet == 0 || packet > MAX_PACKET {
        return Err(TransferError::BadPacketSize { packet });
    }
    Ok(())
}

fn peer_name(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "the peer".to_string())
}

/// A short socket timeout for the duration of a transfer; the caller's
/// timeout comes back when this is dropped.
struct SliceTimeout<'a> {
    stream: &'a TcpStream,
    for_write: bool,
    previous: Option<Duration>,
}

impl<'a> SliceTimeout<'a> {
    fn set(stream: &'a TcpStream, for_write: bool, slice: Duration) -> io::Result<Self> {
        // A zero timeout means "none" to the kernel and is refused by std.
        let slice = slice.max(Duration::from_millis(1));
        let previous = if for_write {
            let previous = stream.write_timeout()?;
            stream.set_write_timeout(Some(slice))?;
            previous
        } else {
            let previous = stream.read_timeout()?;
            stream.set_read_timeout(Some(slice))?;
            previous
        };
        Ok(SliceTimeout {
            stream,
            for_write,
            previous,
        })
    }
}

impl Drop for SliceTimeout<'_> {
    fn drop(&mut self) {
        let _ = if self.for_write {
            self.stream.set_write_timeout(self.previous)
        } else {
            self.stream.set_read_timeout(self.previous)
        };
    }
}

/// Time since the last progress, against a limit.
struct Idle {
    limit: Duration,
    since: Instant,
}

impl Idle {
    fn new(limit: Duration) -> Idle {
        Idle {
            limit,
            since: Instant::now(),
        }
    }

    fn progressed(&mut self) {
        self.since = Instant::now();
    }

    /// After a timed-out read or write: stop, give up, or wait again.
    fn waited(&self, stop: &AtomicBool) -> Result<(), TransferError> {
        if stop_requested(stop) {
            return Err(TransferError::Interrupted);
        }
        if self.since.elapsed() >= self.limit {
            return Err(TransferError::TimedOut { after: self.limit });
        }
        Ok(())
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Calls the progress callback every [`PROGRESS_STEP`] bytes and at the end.
struct Progress<'a> {
    callback: &'a mut dyn FnMut(u64),
    reported: u64,
}

impl Progress<'_> {
    fn update(&mut self, done: u64, finished: bool) {
        if finished || done - self.reported >= PROGRESS_STEP {
            (self.callback)(done);
            self.reported = done;
        }
    }
}

/// Send the whole of `file` (its size when opened) on `stream`.
///
/// With [`SendMethod::Packets`] the file is read in `packet`-byte pieces
/// (the last one shorter) and each piece is written whole: one write() per
/// application packet, as in the lab report. TCP_NODELAY is left as the caller
/// set it (off by default). With Nagle's algorithm on, back-to-back small
/// writes are coalesced into full segments while earlier data is
/// unacknowledged, so a small packet size measures what the lab report's table B
/// measures, the cost of one system call and copy per packet, and not the
/// cost of tiny segments on the wire; a caller who wants the latter sets
/// TCP_NODELAY on the stream first. (Nagle may hold back the final short
/// segment until an earlier small one is acknowledged: that can lengthen
/// the receiver's time, never the sender's, whose write returns as soon as
/// the bytes are queued.)
///
/// With [`SendMethod::Sendfile`] `packet` is only checked for range; the
/// file is hashed after the transfer (see the module documentation).
///
/// The caller announces the size to the receiver from the file's metadata;
/// a file that shrinks while being sent is an error, one that grows is sent
/// up to its size at opening. The stream stays open. `progress` receives
/// the bytes sent so far every 256 KiB and at the end. The transfer stops
/// with [`TransferError::Interrupted`] when `stop` is set or Ctrl-C was
/// pressed, and with [`TransferError::TimedOut`] when the peer accepts
/// nothing for the stream's write timeout, if the caller set one, or else
/// for [`DEFAULT_SEND_IDLE_LIMIT`].
pub fn send_file(
    stream: &TcpStream,
    file: &Path,
    packet: usize,
    method: SendMethod,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Result<TxReport, TransferError> {
    check_packet(packet)?;
    let mut source = File::open(file)
        .map_err(|e| io_error(format!("cannot open {} to send it", file.display()), e))?;
    let meta = source
        .metadata()
        .map_err(|e| io_error(format!("cannot inspect {}", file.display()), e))?;
    if !meta.is_file() {
        return Err(io_error(
            format!("cannot send {}", file.display()),
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (directories, devices and pipes cannot be sent)",
            ),
        ));
    }
    let size = meta.len();
    let idle_limit = stream
        .write_timeout()
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_SEND_IDLE_LIMIT);
    let _slice = SliceTimeout::set(stream, true, POLL_SLICE.min(idle_limit))
        .map_err(|e| io_error("cannot set a send timeout on the connection", e))?;
    let mut progress = Progress {
        callback: progress,
        reported: 0,
    };
    let sending = Sending {
        stream,
        file,
        size,
        stop,
        idle_limit,
    };
    let (elapsed, hash) = match method {
        SendMethod::Packets => sending.packets(&mut source, packet, &mut progress)?,
        SendMethod::Sendfile => sending.sendfile(&mut source, &mut progress)?,
    };
    Ok(TxReport {
        bytes: size,
        elapsed,
        hash,
        method,
    })
}

/// What both send methods share.
struct Sending<'a> {
    stream: &'a TcpStream,
    file: &'a Path,
    size: u64,
    stop: &'a AtomicBool,
    idle_limit: Duration,
}

impl Sending<'_> {
    fn context(&self, sent: u64) -> String {
        format!(
            "sending {} to {} (after {sent} of {} bytes)",
            self.file.display(),
            peer_name(self.stream),
            self.size
        )
    }

    fn shrank(&self, sent: u64) -> TransferError {
        io_error(
            format!("reading {}", self.file.display()),
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file ended after {sent} of its {} bytes: it shrank while being sent",
                    self.size
                ),
            ),
        )
    }

    fn packets(
        &self,
        source: &mut File,
        packet: usize,
        progress: &mut Progress,
    ) -> Result<(Duration, String), TransferError> {
        let mut buf = crate::sock::PageAligned::zeroed(packet);
        let mut hasher = Box::new(Xxh3::new());
        let mut idle = Idle::new(self.idle_limit);
        let mut sent = 0u64;
        let started = Instant::now();
        while sent < self.size {
            if stop_requested(self.stop) {
                return Err(TransferError::Interrupted);
            }
            let want = (self.size - sent).min(packet as u64) as usize;
            let piece = &mut buf[..want];
            self.read_piece(source, piece, sent)?;
            hasher.update(piece);
            self.write_piece(piece, sent, &mut idle)?;
            sent += want as u64;
            progress.update(sent, false);
        }
        let elapsed = started.elapsed();
        progress.update(sent, true);
        Ok((elapsed, hex(&hasher)))
    }

    /// Fill `piece` from the file: a regular file returns short reads only
    /// at its end, but a retry costs nothing and keeps packets whole.
    fn read_piece(
        &self,
        source: &mut File,
        piece: &mut [u8],
        sent: u64,
    ) -> Result<(), TransferError> {
        let mut filled = 0;
        while filled < piece.len() {
            match source.read(&mut piece[filled..]) {
                Ok(0) => return Err(self.shrank(sent + filled as u64)),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(format!("reading {}", self.file.display()), e)),
            }
        }
        Ok(())
    }

    fn write_piece(
        &self,
        mut piece: &[u8],
        sent: u64,
        idle: &mut Idle,
    ) -> Result<(), TransferError> {
        let mut writer = self.stream;
        while !piece.is_empty() {
            match writer.write(piece) {
                Ok(0) => {
                    return Err(io_error(
                        self.context(sent),
                        io::Error::new(
                            io::ErrorKind::WriteZero,
                            "the connection accepted no bytes",
                        ),
                    ))
                }
                Ok(n) => {
                    piece = &piece[n..];
                    idle.progressed();
                }
                Err(e) if is_timeout(&e) => idle.waited(self.stop)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(self.context(sent), e)),
            }
        }
        Ok(())
    }

    fn sendfile(
        &self,
        source: &mut File,
        progress: &mut Progress,
    ) -> Result<(Duration, String), TransferError> {
        let mut idle = Idle::new(self.idle_limit);
        let mut offset: libc::off_t = 0;
        let started = Instant::now();
        while (offset as u64) < self.size {
            if stop_requested(self.stop) {
                return Err(TransferError::Interrupted);
            }
            let count = (self.size - offset as u64).min(SENDFILE_CHUNK as u64) as usize;
            // SAFETY: both descriptors are open for the duration of the
            // call (borrowed from live objects); `offset` is a valid off_t
            // that the kernel advances by the bytes sent, leaving the file
            // position alone.
            let n = unsafe {
                libc::sendfile(
                    self.stream.as_raw_fd(),
                    source.as_raw_fd(),
                    &mut offset,
                    count,
                )
            };
            if n > 0 {
                idle.progressed();
                progress.update(offset as u64, false);
            } else if n == 0 {
                return Err(self.shrank(offset as u64));
            } else {
                let e = io::Error::last_os_error();
                if is_timeout(&e) {
                    idle.waited(self.stop)?;
                } else if e.kind() != io::ErrorKind::Interrupted {
                    return Err(io_error(self.context(offset as u64), e));
                }
            }
        }
        let elapsed = started.elapsed();
        progress.update(offset as u64, true);
        let hash = self.hash_pass(source)?;
        Ok((elapsed, hash))
    }

    /// Hash the first `size` bytes of the file, just sent by sendfile and
    /// so in the page cache.
    fn hash_pass(&self, source: &mut File) -> Result<String, TransferError> {
        let reading = |e| io_error(format!("reading {} to hash it", self.file.display()), e);
        source.seek(SeekFrom::Start(0)).map_err(reading)?;
        let mut hasher = Box::new(Xxh3::new());
        let mut buf = crate::sock::PageAligned::zeroed(BULK_CHUNK);
        let mut hashed = 0u64;
        while hashed < self.size {
            if stop_requested(self.stop) {
                return Err(TransferError::Interrupted);
            }
            let want = (self.size - hashed).min(BULK_CHUNK as u64) as usize;
            match source.read(&mut buf[..want]) {
                Ok(0) => return Err(self.shrank(hashed)),
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    hashed += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(reading(e)),
            }
        }
        Ok(hex(&hasher))
    }
}

/// The hidden file a receiver writes into. Removed on drop unless settled
/// (renamed into place or already removed).
#[derive(Debug)]
struct Partial {
    path: PathBuf,
    dir: PathBuf,
    file: File,
    settled: AtomicBool,
}

impl Partial {
    /// Remove the file now; Ok if it is already gone.
    fn remove(&self) -> Result<(), TransferError> {
        if self.settled.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(
                format!("cannot remove the partial file {}", self.path.display()),
                e,
            )),
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// The directory and file name of a destination path.
fn split_destination(dest: &Path) -> Result<(PathBuf, &std::ffi::OsStr), TransferError> {
    let name = dest.file_name().ok_or_else(|| {
        io_error(
            format!("cannot receive into {}", dest.display()),
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the destination must end in a file name",
            ),
        )
    })?;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

/// `.NAME.osprobe-partial-<ULID>`, with NAME shortened (at a character
/// boundary when it is UTF-8) so the whole stays within NAME_MAX.
fn partial_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let random = osprobe_core::id::new_run_id();
    let room = MAX_NAME_BYTES - 1 - PARTIAL_MARK.len() - random.len();
    let bytes = name.as_bytes();
    let mut keep = bytes.len().min(room);
    if let Ok(text) = std::str::from_utf8(bytes) {
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut out = Vec::with_capacity(MAX_NAME_BYTES);
    out.push(b'.');
    out.extend_from_slice(&bytes[..keep]);
    out.extend_from_slice(PARTIAL_MARK.as_bytes());
    out.extend_from_slice(random.as_bytes());
    std::ffi::OsStr::from_bytes(&out).to_os_string()
}

fn create_partial(dest: &Path) -> Result<Partial, TransferError> {
    let (dir, name) = split_destination(dest)?;
    let mut attempts = 0;
    loop {
        let path = dir.join(partial_name(name));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => {
                return Ok(Partial {
                    path,
                    dir,
                    file,
                    settled: AtomicBool::new(false),
                })
            }
            // 80 random bits make a collision all but impossible; retry a
            // few times rather than trust that.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 3 => attempts += 1,
            Err(e) => {
                let context = format!("cannot create a file in {}", dir.display());
                return Err(storage_error(e, &dir, context));
            }
        }
    }
}

/// Receive exactly `expected_bytes` from `stream` into a new hidden partial
/// file beside `dest`, in reads of up to `packet` bytes, hashing as it
/// writes. `dest` is where [`commit`] will put the file (pass it through
/// [`confine`] when a peer chose the name).
///
/// The connection ending first is [`TransferError::Truncated`]; bytes
/// beyond the expected count are [`TransferError::TooLong`] when they
/// arrive with the last expected ones or are already queued when the
/// transfer completes (later ones are the caller's to notice). Nothing
/// arriving for `idle_timeout` is [`TransferError::TimedOut`]; `stop` or
/// Ctrl-C is [`TransferError::Interrupted`]. On any error the partial file
/// is removed.
pub fn receive_file(
    stream: &TcpStream,
    dest: &Path,
    expected_bytes: u64,
    packet: usize,
    stop: &AtomicBool,
    idle_timeout: Duration,
) -> Result<RxReport, TransferError> {
    check_packet(packet)?;
    let mut partial = create_partial(dest)?;
    let _slice = SliceTimeout::set(stream, false, POLL_SLICE.min(idle_timeout))
        .map_err(|e| io_error("cannot set a receive timeout on the connection", e))?;
    let context = |got: u64| {
        format!(
            "receiving {} from {} (after {got} of {expected_bytes} bytes)",
            dest.display(),
            peer_name(stream)
        )
    };
    let mut buf = crate::sock::PageAligned::zeroed(packet);
    let mut hasher = Box::new(Xxh3::new());
    let mut idle = Idle::new(idle_timeout);
    let mut reader = stream;
    let mut got = 0u64;
    let mut started: Option<Instant> = None;
    while got < expected_bytes {
        if stop_requested(stop) {
            return Err(TransferError::Interrupted);
        }
        let n = match reader.read(&mut buf) {
            Ok(0) => {
                return Err(TransferError::Truncated {
                    expected: expected_bytes,
                    got,
                })
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => {
                idle.waited(stop)?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(context(got), e)),
        };
        started.get_or_insert_with(Instant::now);
        idle.progressed();
        if n as u64 > expected_bytes - got {
            return Err(TransferError::TooLong {
                expected: expected_bytes,
            });
        }
        hasher.update(&buf[..n]);
        partial.file.write_all(&buf[..n]).map_err(|e| {
            let what = format!("writing {}", partial.path.display());
            storage_error(e, &partial.dir, what)
        })?;
        got += n as u64;
    }
    let elapsed = started.map(|s| s.elapsed()).unwrap_or_default();
    if bytes_waiting(stream) {
        return Err(TransferError::TooLong {
            expected: expected_bytes,
        });
    }
    Ok(RxReport {
        bytes: got,
        elapsed,
        hash: hex(&hasher),
        partial_path: partial.path.clone(),
        partial,
    })
}

/// Whether the peer has already sent more bytes (without waiting for any).
fn bytes_waiting(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: the buffer is one valid byte; MSG_PEEK leaves the data queued
    // and MSG_DONTWAIT makes the call return at once.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// Keep the received file as `final_path`, if its hash is `expected_hash`
/// (the sender's; compared without regard to case): fsync the data, rename
/// the partial file into place (refusing to replace an existing file unless
/// `overwrite`), then fsync the directory so the rename survives a crash.
///
/// On a hash mismatch the partial file is removed. On other errors (the
/// destination exists, a failed fsync) it is left for [`discard`], or for
/// the drop of `rx`. `final_path` must be on the same file system as the
/// partial file; it normally is the `dest` given to [`receive_file`].
pub fn commit(
    rx: &RxReport,
    expected_hash: &str,
    final_path: &Path,
    overwrite: bool,
) -> Result<(), TransferError> {
    let partial = &rx.partial;
    if partial.settled.load(Ordering::SeqCst) {
        return Err(io_error(
            format!("cannot commit {}", partial.path.display()),
            io::Error::new(
                io::ErrorKind::NotFound,
                "the partial file was already committed or discarded",
            ),
        ));
    }
    if !expected_hash.eq_ignore_ascii_case(&rx.hash) {
        partial.remove()?;
        return Err(TransferError::HashMismatch {
            expected: printable(expected_hash),
            got: rx.hash.clone(),
        });
    }
    partial.file.sync_all().map_err(|e| {
        let what = format!("flushing {} to disk", partial.path.display());
        storage_error(e, &partial.dir, what)
    })?;
    let renamed = if overwrite {
        std::fs::rename(&partial.path, final_path)
    } else {
        rename_noreplace(&partial.path, final_path)
    };
    match renamed {
        Ok(()) => partial.settled.store(true, Ordering::SeqCst),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(TransferError::AlreadyExists {
                path: final_path.to_path_buf(),
            })
        }
        Err(e) => {
            let what = format!(
                "cannot rename {} to {}",
                partial.path.display(),
                final_path.display()
            );
            return Err(io_error(what, e));
        }
    }
    sync_directory(final_path)
}

/// Remove the partial file of `rx` without keeping it; nothing to do if it
/// is already gone (committed, or removed after a hash mismatch). A failure
/// to remove it is not reported: the name is hidden and marked as partial,
/// and there is nothing better the caller could do about it.
pub fn discard(rx: &RxReport) {
    let _ = rx.partial.remove();
}

/// Like [`receive_file`], but the bytes go socket -> pipe -> file with
/// splice(2), so the receiver copies each byte once (into the page cache)
/// instead of twice (socket to buffer, buffer to file): the receiving end
/// of `osprobe send`, whose sender uses sendfile. The hash is computed
/// after the last byte is written, by reading the file back from the page
/// cache; that pass is outside `elapsed` (Rx is the time to receive and
/// store, as in [`receive_file`]).
pub fn receive_file_spliced(
    stream: &TcpStream,
    dest: &Path,
    expected_bytes: u64,
    stop: &AtomicBool,
    idle_timeout: Duration,
) -> Result<RxReport, TransferError> {
    let partial = create_partial(dest)?;
    let _slice = SliceTimeout::set(stream, false, POLL_SLICE.min(idle_timeout))
        .map_err(|e| io_error("cannot set a receive timeout on the connection", e))?;
    let pipe = Pipe::new().map_err(|e| io_error("cannot create a pipe for splice", e))?;
    let socket_fd = stream.as_raw_fd();
    let file_fd = partial.file.as_raw_fd();
    if expected_bytes > 0 {
        // Reserve the blocks up front: fewer allocations while data flows,
        // and a full disk shows at once. Not every file system can.
        // SAFETY: fallocate on our own file descriptor.
        let rc = unsafe { libc::fallocate(file_fd, 0, 0, expected_bytes as libc::off_t) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
                return Err(storage_error(e, &partial.dir, "reserving space"));
            }
        }
    }
    let mut idle = Idle::new(idle_timeout);
    let mut got = 0u64;
    let mut started: Option<Instant> = None;
    while got < expected_bytes {
        if stop_requested(stop) {
            return Err(TransferError::Interrupted);
        }
        // Never ask for more than is expected: extra bytes stay in the
        // socket, where the check below finds them.
        let want = (expected_bytes - got).min(pipe.capacity as u64) as usize;
        // SAFETY: splice between two descriptors we own; no user memory.
        let n = unsafe {
            libc::splice(
                socket_fd,
                std::ptr::null_mut(),
                pipe.write,
                std::ptr::null_mut(),
                want,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE,
            )
        };
        if n == 0 {
            return Err(TransferError::Truncated {
                expected: expected_bytes,
                got,
            });
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if is_timeout(&e) {
                idle.waited(stop)?;
                continue;
            }
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let context = format!("receiving {} from {}", dest.display(), peer_name(stream));
            return Err(io_error(context, e));
        }
        started.get_or_insert_with(Instant::now);
        idle.progressed();
        let mut in_pipe = n as usize;
        while in_pipe > 0 {
            // SAFETY: as above; the file offset advances with each call.
            let m = unsafe {
                libc::splice(
                    pipe.read,
                    std::ptr::null_mut(),
                    file_fd,
                    std::ptr::null_mut(),
                    in_pipe,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE,
                )
            };
            if m <= 0 {
                let e = io::Error::last_os_error();
                if m < 0 && e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let what = format!("writing {}", partial.path.display());
                return Err(storage_error(e, &partial.dir, what));
            }
            in_pipe -= m as usize;
        }
        got += n as u64;
    }
    let elapsed = started.map(|s| s.elapsed()).unwrap_or_default();
    if bytes_waiting(stream) {
        return Err(TransferError::TooLong {
            expected: expected_bytes,
        });
    }
    let hash = hash_file(&partial.path)
        .map_err(|e| io_error(format!("hashing {}", partial.path.display()), e))?;
    Ok(RxReport {
        bytes: got,
        elapsed,
        hash,
        partial_path: partial.path.clone(),
        partial,
    })
}

/// A pipe for splice, closed on drop.
struct Pipe {
    read: RawFd,
    write: RawFd,
    capacity: usize,
}

impl Pipe {
    /// 1 MiB when the system allows (pipe-max-size), else the default 64 KiB.
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: F_SETPIPE_SZ/F_GETPIPE_SZ on the pipe we just made.
        let capacity = unsafe {
            libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 1 << 20);
            libc::fcntl(fds[1], libc::F_GETPIPE_SZ)
        };
        Ok(Pipe {
            read: fds[0],
            write: fds[1],
            capacity: if capacity > 0 {
                capacity as usize
            } else {
                64 << 10
            },
        })
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: both descriptors are ours and closed exactly once.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

/// Remove the partial files a receiver killed outright left in `dir`
/// (hidden names carrying the partial mark); returns how many. A server
/// calls it when it starts, before anyone can be receiving into `dir`.
pub fn sweep_partials(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with('.') && name.contains(PARTIAL_MARK)
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// rename(2) that fails with EEXIST instead of replacing `to`. File systems
/// without RENAME_NOREPLACE fall back to link + unlink, which is just as
/// atomic about not replacing.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c_from = c_path(from)?;
    let c_to = c_path(to)?;
    // SAFETY: both paths are NUL-terminated strings that outlive the call;
    // renameat2 through syscall() works whatever the C library provides.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(e),
    }
}

fn sync_directory(path: &Path) -> Result<(), TransferError> {
    let (dir, _) = split_destination(path)?;
    let result = File::open(&dir).and_then(|d| d.sync_all());
    match result {
        Ok(()) => Ok(()),
        // Some file systems cannot fsync a directory; the rename is done.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(io_error(
            format!("flushing directory {} to disk", dir.display()),
            e,
        )),
    }
}

/// Refuse to start a transfer of `bytes` into `dir` when its file system
/// has less free space (for unprivileged writers, as statvfs reports it).
pub fn check_space(dir: &Path, bytes: u64) -> Result<(), TransferError> {
    let available = scratch::free_bytes(dir)
        .map_err(|e| io_error(format!("cannot check free space in {}", dir.display()), e))?;
    if bytes > available {
        return Err(TransferError::NotEnoughSpace {
            dir: dir.to_path_buf(),
            needed: bytes,
            available,
        });
    }
    Ok(())
}

/// A name as it can be shown safely: escaped (control and invisible
/// characters as `\u{...}`) and cut after [`MAX_PRINTED_CHARS`] characters.
fn printable(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX_PRINTED_CHARS {
            out.push_str(&format!("... ({} bytes in all)", name.len()));
            break;
        }
        if is_invisible_format(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.extend(c.escape_debug());
        }
    }
    out
}

/// Characters that change how the text around them is displayed without
/// showing themselves: bidirectional overrides and isolates (the "Trojan
/// Source" characters), marks, the byte-order mark and line separators.
/// The zero-width joiners stay allowed: emoji sequences and some scripts
/// need them.
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why a peer's file name is not a plain file name, if it is not.
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "the name is {} bytes long; at most {MAX_NAME_BYTES} are accepted",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Some("it contains a NUL character".into());
    }
    if name.contains('/') || name.contains('\\') {
        return Some("it contains a path separator; only a plain file name is accepted".into());
    }
    if name == "." || name == ".." {
        return Some("it names a directory, not a file".into());
    }
    if name.starts_with('.') {
        return Some(
            "it starts with '.'; hidden names are reserved for files being received".into(),
        );
    }
    if let Some(c) = name.chars().find(|&c| c.is_control()) {
        return Some(format!(
            "it contains the control character U+{:04X}",
            c as u32
        ));
    }
    if let Some(c) = name.chars().find(|&c| is_invisible_format(c)) {
        return Some(format!(
            "it contains the invisible formatting character U+{:04X}, which can make a name display misleadingly",
            c as u32
        ));
    }
    None
}

/// Map a file name chosen by a (possibly hostile) peer to a path inside
/// `dir`. Only a plain file name is accepted: not empty, at most 255 bytes,
/// no '/', '\\', NUL, control or invisible formatting characters, not `.`
/// or `..`, not starting with '.' (so it cannot name a partial file). A
/// name that exists in `dir` as a symbolic link, a directory or anything
/// but a regular file is refused as well. (A link created after this check
/// is harmless: the data goes to a file created with O_EXCL and is renamed
/// over the name, which replaces a link instead of following it.)
pub fn confine(dir: &Path, requested: &str) -> Result<PathBuf, TransferError> {
    let refuse = |why: String| TransferError::BadName {
        name: printable(requested),
        why,
    };
    if let Some(why) = name_problem(requested) {
        return Err(refuse(why));
    }
    let path = dir.join(requested);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(refuse(format!(
            "it exists in {} as a symbolic link",
            dir.display()
        ))),
        Ok(meta) if meta.is_dir() => Err(refuse(format!(
            "it exists in {} as a directory",
            dir.display()
        ))),
        Ok(meta) if !meta.is_file() => Err(refuse(format!(
            "it exists in {} and is not a regular file",
            dir.display()
        ))),
        Ok(_) => Ok(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(io_error(format!("cannot inspect {}", path.display()), e)),
    }
}

/// Create `osprobe-source-<size>-<seed>.bin` in `dir`: `size` bytes of
/// pseudo-random content fixed by `seed`, incompressible so that no layer
/// (a compressing file system, a compressing link) can shorten it. Written
/// in 1 MiB chunks and flushed to disk before returning, so no write-back
/// of this file competes with the transfer that follows. Replaces an
/// earlier file of that name; refuses to follow a symbolic link.
pub fn create_source_file(dir: &Path, size: u64, seed: u64) -> io::Result<PathBuf> {
    let path = dir.join(format!("osprobe-source-{size}-{seed:016x}.bin"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| with_path(e, "cannot create", &path))?;
    let mut rng = SplitMix64::new(seed);
    let mut buf = crate::sock::PageAligned::zeroed(BULK_CHUNK);
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(BULK_CHUNK as u64) as usize;
        rng.fill(&mut buf[..n]);
        file.write_all(&buf[..n])
            .map_err(|e| with_path(e, "cannot write", &path))?;
        written += n as u64;
    }
    file.sync_all()
        .map_err(|e| with_path(e, "cannot flush", &path))?;
    Ok(path)
}

#[cfg(test)]
mod spliced_and_sweep_tests {
    use super::*;
    use std::net::TcpListener;

    /// Send `data` from a thread (closing after `send` bytes) and receive
    /// it spliced into `dir`.
    fn spliced(dir: &Path, data: Vec<u8>, send: usize) -> Result<RxReport, TransferError> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&data[..send]).unwrap();
        });
        let (stream, _) = listener.accept().unwrap();
        let stop = AtomicBool::new(false);
        let expected = 3 << 20;
        let rx = receive_file_spliced(
            &stream,
            &dir.join("f.bin"),
            expected,
            &stop,
            Duration::from_secs(5),
        );
        sender.join().unwrap();
        rx
    }

    fn data() -> Vec<u8> {
        let mut rng = osprobe_core::random::SplitMix64::new(7);
        (0..3 << 20).map(|_| rng.next_u64() as u8).collect()
    }

    #[test]
    fn spliced_receive_arrives_identical_and_commits() {
        let dir = osprobe_core::scratch::ScratchDir::new().unwrap();
        let data = data();
        let rx = spliced(dir.path(), data.clone(), data.len()).unwrap();
        assert_eq!(rx.bytes, data.len() as u64);
        let expected_hash = {
            let mut h = Xxh3::new();
            h.update(&data);
            hex(&h)
        };
        assert_eq!(rx.hash, expected_hash);
        commit(&rx, &expected_hash, &dir.path().join("f.bin"), false).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f.bin")).unwrap(), data);
    }

    #[test]
    fn spliced_receive_of_a_truncated_stream_leaves_nothing() {
        let dir = osprobe_core::scratch::ScratchDir::new().unwrap();
        let err = spliced(dir.path(), data(), 1 << 20).err().unwrap();
        assert!(
            matches!(err, TransferError::Truncated { got, .. } if got == 1 << 20),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn sweep_removes_partials_only() {
        let dir = osprobe_core::scratch::ScratchDir::new().unwrap();
        let p = dir.path();
        std::fs::write(p.join(".data.bin.osprobe-partial-01ABC"), b"x").unwrap();
        std::fs::write(p.join("data.bin"), b"kept").unwrap();
        std::fs::write(p.join(".hidden"), b"kept").unwrap();
        assert_eq!(sweep_partials(p), 1);
        assert!(p.join("data.bin").exists() && p.join(".hidden").exists());
        assert_eq!(sweep_partials(p), 0);
        assert_eq!(sweep_partials(&p.join("missing")), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::scratch::ScratchDir;
    use std::net::{Shutdown, TcpListener};
    use std::sync::Arc;
    use std::thread;

    const PATIENCE: Duration = Duration::from_secs(20);

    fn connected_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn partial_files(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(PARTIAL_MARK))
            .collect()
    }

    /// Send `src` with `method` while a thread receives it into `dest`.
    fn transfer(
        src: &Path,
        dest: &Path,
        packet: usize,
        method: SendMethod,
    ) -> (
        Result<TxReport, TransferError>,
        Result<RxReport, TransferError>,
    ) {
        let (tx_stream, rx_stream) = connected_pair();
        tx_stream.set_write_timeout(Some(PATIENCE)).unwrap();
        let expected = std::fs::metadata(src).unwrap().len();
        let dest = dest.to_path_buf();
        let receiver = thread::spawn(move || {
            let never = AtomicBool::new(false);
            receive_file(&rx_stream, &dest, expected, packet, &never, PATIENCE)
        });
        let never = AtomicBool::new(false);
        let mut last_progress = 0;
        let tx = send_file(&tx_stream, src, packet, method, &never, &mut |n| {
            assert!(n >= last_progress);
            last_progress = n;
        });
        if tx.is_ok() {
            assert_eq!(last_progress, expected, "progress ends at the file size");
        }
        drop(tx_stream);
        (tx, receiver.join().unwrap())
    }

    #[test]
    fn files_arrive_byte_identical_for_every_size_packet_and_method() {
        let scratch = ScratchDir::new().unwrap();
        let out = scratch.path().join("out");
        std::fs::create_dir(&out).unwrap();
        for (i, size) in [0u64, 1, 1000, 3 << 20].into_iter().enumerate() {
            let src = create_source_file(scratch.path(), size, i as u64).unwrap();
            let source_hash = hash_file(&src).unwrap();
            for packet in [30, 1000, 65536] {
                for method in [SendMethod::Packets, SendMethod::Sendfile] {
                    let label = format!("{size} B, packet {packet}, {}", method.as_str());
                    let dest = confine(&out, &format!("copy-{size}-{packet}-{}", method.as_str()))
                        .unwrap();
                    let (tx, rx) = transfer(&src, &dest, packet, method);
                    let tx = tx.unwrap_or_else(|e| panic!("{label}: {e}"));
                    let rx = rx.unwrap_or_else(|e| panic!("{label}: {e}"));
                    assert_eq!((tx.bytes, rx.bytes), (size, size), "{label}");
                    assert_eq!(tx.method, method);
                    assert_eq!(tx.hash, source_hash, "{label}");
                    assert_eq!(rx.hash, source_hash, "{label}");
                    assert!(rx.partial_path.exists(), "{label}");
                    commit(&rx, &tx.hash, &dest, false).unwrap_or_else(|e| panic!("{label}: {e}"));
                    assert!(!rx.partial_path.exists(), "{label}");
                    assert_eq!(
                        std::fs::read(&dest).unwrap(),
                        std::fs::read(&src).unwrap(),
                        "{label}"
                    );
                    assert_eq!(hash_file(&dest).unwrap(), source_hash, "{label}");
                    discard(&rx); // already committed: a no-op
                    assert!(dest.exists(), "{label}");
                }
            }
        }
        assert!(partial_files(&out).is_empty());
    }

    #[test]
    fn streaming_hash_matches_the_one_shot_hash() {
        let scratch = ScratchDir::new().unwrap();
        let src = create_source_file(scratch.path(), (3 << 20) + 7, 9).unwrap();
        let data = std::fs::read(&src).unwrap();
        let one_shot = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&data));
        assert_eq!(hash_file(&src).unwrap(), one_shot);
        assert_eq!(one_shot.len(), 32);
        let empty = create_source_file(scratch.path(), 0, 1).unwrap();
        assert_eq!(
            hash_file(&empty).unwrap(),
            format!("{:032x}", xxhash_rust::xxh3::xxh3_128(b""))
        );
    }

    #[test]
    fn a_sender_that_closes_early_is_truncated_and_leaves_nothing() {
        let scratch = ScratchDir::new().unwrap();
        let dest = scratch.path().join("file");
        let (mut tx_stream, rx_stream) = connected_pair();
        let receiver = thread::spawn(move || {
            let never = AtomicBool::new(false);
            receive_file(&rx_stream, &dest, 1000, 64, &never, PATIENCE)
        });
        tx_stream.write_all(&[7u8; 500]).unwrap();
        tx_stream.shutdown(Shutdown::Both).unwrap();
        drop(tx_stream);
        match receiver.join().unwrap() {
            Err(TransferError::Truncated {
                expected: 1000,
                got: 500,
            }) => {}
            other => panic!("expected Truncated 500 of 1000, got {other:?}"),
        }
        assert!(partial_files(scratch.path()).is_empty());
        assert!(!scratch.path().join("file").exists());
    }

    #[test]
    fn more_bytes_than_announced_are_refused() {
        let scratch = ScratchDir::new().unwrap();
        let dest = scratch.path().join("file");
        for packet in [4096, 100] {
            let (mut tx_stream, rx_stream) = connected_pair();
            // All 1500 bytes are queued before the receiver starts, so the
            // extra ones arrive with the expected ones or wait behind them.
            tx_stream.write_all(&[1u8; 1500]).unwrap();
            let never = AtomicBool::new(false);
            let rx = receive_file(&rx_stream, &dest, 1000, packet, &never, PATIENCE);
            assert!(
                matches!(rx, Err(TransferError::TooLong { expected: 1000 })),
                "{rx:?}"
            );
            assert!(partial_files(scratch.path()).is_empty());
        }
    }

    #[test]
    fn a_hash_mismatch_keeps_neither_final_nor_partial_file() {
        let scratch = ScratchDir::new().unwrap();
        let src = create_source_file(scratch.path(), 5000, 3).unwrap();
        let dest = scratch.path().join("copy");
        let (tx, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
        let (tx, rx) = (tx.unwrap(), rx.unwrap());
        let wrong = "0".repeat(32);
        match commit(&rx, &wrong, &dest, true) {
            Err(TransferError::HashMismatch { expected, got }) => {
                assert_eq!(expected, wrong);
                assert_eq!(got, tx.hash);
            }
            other => panic!("expected HashMismatch, got {other:?}"),
        }
        assert!(!dest.exists());
        assert!(partial_files(scratch.path()).is_empty());
        // The report is spent: a second commit is an error, not a panic.
        assert!(matches!(
            commit(&rx, &tx.hash, &dest, true),
            Err(TransferError::Io { .. })
        ));
    }

    #[test]
    fn hashes_compare_without_case_and_hostile_hashes_print_escaped() {
        let scratch = ScratchDir::new().unwrap();
        let src = create_source_file(scratch.path(), 100, 4).unwrap();
        let dest = scratch.path().join("copy");
        let (tx, rx) = transfer(&src, &dest, 30, SendMethod::Sendfile);
        let (tx, rx) = (tx.unwrap(), rx.unwrap());
        commit(&rx, &tx.hash.to_uppercase(), &dest, false).unwrap();
        assert!(dest.exists());

        let dest2 = scratch.path().join("copy2");
        let (_, rx) = transfer(&src, &dest2, 30, SendMethod::Packets);
        let e = commit(&rx.unwrap(), "\u{1b}[2J\u{202e}", &dest2, false).unwrap_err();
        let message = e.to_string();
        assert!(
            !message.contains('\u{1b}') && !message.contains('\u{202e}'),
            "{message}"
        );
    }

    #[test]
    fn commit_refuses_to_overwrite_unless_allowed() {
        let scratch = ScratchDir::new().unwrap();
        let src = create_source_file(scratch.path(), 2000, 5).unwrap();
        let dest = scratch.path().join("existing");
        std::fs::write(&dest, b"keep me").unwrap();
        let (tx, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
        let (tx, rx) = (tx.unwrap(), rx.unwrap());
        match commit(&rx, &tx.hash, &dest, false) {
            Err(TransferError::AlreadyExists { path }) => assert_eq!(path, dest),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        assert_eq!(std::fs::read(&dest).unwrap(), b"keep me");
        assert!(rx.partial_path.exists(), "kept for the caller to decide");
        commit(&rx, &tx.hash, &dest, true).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), std::fs::read(&src).unwrap());
        assert!(partial_files(scratch.path()).is_empty());
    }

    #[test]
    fn discard_and_drop_remove_the_partial_file() {
        let scratch = ScratchDir::new().unwrap();
        let src = create_source_file(scratch.path(), 3000, 6).unwrap();
        let dest = scratch.path().join("copy");
        let (_, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
        let rx = rx.unwrap();
        assert!(rx.partial_path.exists());
        let name = rx
            .partial_path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with(".copy.osprobe-partial-"), "{name}");
        discard(&rx);
        assert!(!rx.partial_path.exists());
        discard(&rx);

        let (_, rx) = transfer(&src, &dest, 1000, SendMethod::Packets);
        let partial = rx.unwrap().partial_path.clone();
        assert!(!partial.exists(), "dropping the report removes the file");
        assert!(!dest.exists());
    }

    #[test]
    fn partial_names_stay_within_name_max() {
        let long = "é".repeat(127); // 254 bytes
        let name = partial_name(std::ffi::OsStr::new(&long));
        assert!(name.len() <= MAX_NAME_BYTES, "{}", name.len());
        let text = name.to_str().expect("cut at a character boundary");
        assert!(text.starts_with(".éé") && text.contains(PARTIAL_MARK));
        let scratch = ScratchDir::new().unwrap();
        let dest = confine(scratch.path(), &long).unwrap();
        let partial = create_partial(&dest).unwrap();
        assert!(partial.path.exists());
    }

    #[test]
    fn a_silent_sender_times_out_and_a_stopped_receiver_stops() {
        let scratch = ScratchDir::new().unwrap();
        let dest = scratch.path().join("file");
        let (tx_stream, rx_stream) = connected_pair();
        rx_stream
            .set_read_timeout(Some(Duration::from_secs(7)))
            .unwrap();
        let never = AtomicBool::new(false);
        let idle = Duration::from_millis(300);
        let rx = receive_file(&rx_stream, &dest, 10, 64, &never, idle);
        assert!(
            matches!(rx, Err(TransferError::TimedOut { after }) if after == idle),
            "{rx:?}"
        );
        assert_eq!(
            rx_stream.read_timeout().unwrap(),
            Some(Duration::from_secs(7)),
            "restored"
        );
        let stop = AtomicBool::new(true);
        let rx = receive_file(&rx_stream, &dest, 10, 64, &stop, PATIENCE);
        assert!(matches!(rx, Err(TransferError::Interrupted)), "{rx:?}");
        assert!(partial_files(scratch.path()).is_empty());
        drop(tx_stream);
    }

    /// A peer that never reads: the sender fills the socket buffers, then
    /// must give up on its idle limit or on the stop flag.
    #[test]
    fn a_sender_facing_a_peer_that_never_reads_times_out_or_stops() {
        let scratch = ScratchDir::new().unwrap();
        // Larger than loopback's send and receive buffers together.
        let src = create_source_file(scratch.path(), 48 << 20, 7).unwrap();
        for method in [SendMethod::Packets, SendMethod::Sendfile] {
            let (tx_stream, _rx_stream) = connected_pair();
            let limit = Duration::from_millis(500);
            tx_stream.set_write_timeout(Some(limit)).unwrap();
            let never = AtomicBool::new(false);
            let tx = send_file(&tx_stream, &src, 65536, method, &never, &mut |_| {});
            assert!(
                matches!(tx, Err(TransferError::TimedOut { after }) if after == limit),
                "{method:?}: {tx:?}"
            );
            assert_eq!(tx_stream.write_timeout().unwrap(), Some(limit), "restored");

            let (tx_stream, _rx_stream) = connected_pair();
            let stop = Arc::new(AtomicBool::new(false));
            let stopper = {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    thread::sleep(Duration::from_millis(300));
                    stop.store(true, Ordering::SeqCst);
                })
            };
            let tx = send_file(&tx_stream, &src, 65536, method, &stop, &mut |_| {});
            stopper.join().unwrap();
            assert!(
                matches!(tx, Err(TransferError::Interrupted)),
                "{method:?}: {tx:?}"
            );
        }
    }

    #[test]
    fn bad_inputs_are_named() {
        let scratch = ScratchDir::new().unwrap();
        let (tx_stream, _rx_stream) = connected_pair();
        let never = AtomicBool::new(false);
        let e = send_file(
            &tx_stream,
            scratch.path(),
            1000,
            SendMethod::Packets,
            &never,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let missing = scratch.path().join("missing");
        let e = send_file(
            &tx_stream,
            &missing,
            1000,
            SendMethod::Sendfile,
            &never,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        let src = create_source_file(scratch.path(), 10, 1).unwrap();
        for packet in [0, MAX_PACKET + 1] {
            let e = send_file(
                &tx_stream,
                &src,
                packet,
                SendMethod::Packets,
                &never,
                &mut |_| {},
            );
            assert!(
                matches!(e, Err(TransferError::BadPacketSize { .. })),
                "{e:?}"
            );
            let e = receive_file(
                &tx_stream,
                &scratch.path().join("x"),
                1,
                packet,
                &never,
                PATIENCE,
            );
            assert!(
                matches!(e, Err(TransferError::BadPacketSize { .. })),
                "{e:?}"
            );
        }
        let e = receive_file(&tx_stream, Path::new("/"), 1, 10, &never, PATIENCE).unwrap_err();
        assert!(e.to_string().contains("file name"), "{e}");
    }

    #[test]
    fn hostile_names_are_refused_and_plain_ones_confined() {
        let scratch = ScratchDir::new().unwrap();
        let dir = scratch.path();
        let long = "a".repeat(256);
        for hostile in [
            "../etc/passwd",
            "/abs",
            "a/b",
            "a\\b",
            "..",
            ".",
            "",
            "x\0y",
            ".hidden",
            ".x.osprobe-partial-1",
            long.as_str(),
            "tab\there",
            "new\nline",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}",
            "txt.\u{202e}exe.sh",
            "iso\u{2066}late",
            "bom\u{feff}",
        ] {
            match confine(dir, hostile) {
                Err(TransferError::BadName { name, why }) => {
                    assert!(!why.is_empty());
                    assert!(
                        name.chars()
                            .all(|c| !c.is_control() && !is_invisible_format(c)),
                        "printable: {name:?}"
                    );
                    assert!(name.len() < 200, "shortened: {name}");
                }
                other => panic!("{hostile:?} accepted: {other:?}"),
            }
        }
        let e = confine(dir, "txt.\u{202e}exe.sh").unwrap_err().to_string();
        assert!(e.contains("\\u{202e}") && e.contains("U+202E"), "{e}");
        for fine in [
            "report.pdf",
            "a",
            "a.b",
            "a..",
            "name with spaces",
            "Grüße-日本語-файл.txt",
            "family-\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}",
            "a".repeat(255).as_str(),
        ] {
            let path = confine(dir, fine).unwrap_or_else(|e| panic!("{fine:?} refused: {e}"));
            assert_eq!(path.parent(), Some(dir));
            assert_eq!(path.file_name().unwrap(), fine);
        }
        // Existing entries: a regular file may be named (commit decides on
        // overwriting); a symbolic link or a directory may not.
        std::fs::write(dir.join("existing"), b"x").unwrap();
        assert!(confine(dir, "existing").is_ok());
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let e = confine(dir, "link").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::os::unix::fs::symlink("/nonexistent/target", dir.join("dangling")).unwrap();
        assert!(confine(dir, "dangling").is_err());
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert!(confine(dir, "sub").is_err());
    }

    #[test]
    fn check_space_refuses_absurd_sizes() {
        let scratch = ScratchDir::new().unwrap();
        check_space(scratch.path(), 1).unwrap();
        match check_space(scratch.path(), u64::MAX) {
            Err(TransferError::NotEnoughSpace {
                needed, available, ..
            }) => {
                assert_eq!(needed, u64::MAX);
                assert!(available < u64::MAX);
            }
            other => panic!("expected NotEnoughSpace, got {other:?}"),
        }
        let e = check_space(Path::new("/nonexistent/osprobe"), 1).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe"), "{e}");
    }

    #[test]
    fn disk_full_and_quota_errors_name_the_directory() {
        let dir = Path::new("/srv/incoming");
        for errno in [libc::ENOSPC, libc::EDQUOT] {
            let e = storage_error(io::Error::from_raw_os_error(errno), dir, "writing");
            assert!(
                matches!(&e, TransferError::DiskFull { dir: d } if d == dir),
                "{e:?}"
            );
            assert!(e.to_string().contains("/srv/incoming"), "{e}");
        }
        let e = storage_error(io::Error::from_raw_os_error(libc::EIO), dir, "writing x");
        assert!(matches!(e, TransferError::Io { .. }));
    }

    #[test]
    fn source_files_are_sized_seeded_and_incompressible() {
        let scratch = ScratchDir::new().unwrap();
        let size = (1 << 20) + 3;
        let a = create_source_file(scratch.path(), size, 11).unwrap();
        let a_bytes = std::fs::read(&a).unwrap();
        assert_eq!(a_bytes.len() as u64, size);
        let again = create_source_file(scratch.path(), size, 11).unwrap();
        assert_eq!(again, a);
        assert_eq!(std::fs::read(&again).unwrap(), a_bytes, "fixed by the seed");
        let b = create_source_file(scratch.path(), size, 12).unwrap();
        assert_ne!(std::fs::read(&b).unwrap(), a_bytes);
        // Every byte value about equally frequent: nothing to compress.
        let mut counts = [0u32; 256];
        for &byte in &a_bytes {
            counts[byte as usize] += 1;
        }
        let mean = a_bytes.len() as f64 / 256.0;
        assert!(
            counts.iter().all(|&c| (c as f64 - mean).abs() < mean * 0.1),
            "{counts:?}"
        );
        std::os::unix::fs::symlink(
            "/nonexistent",
            scratch.path().join("osprobe-source-5-0000000000000001.bin"),
        )
        .unwrap();
        assert!(
            create_source_file(scratch.path(), 5, 1).is_err(),
            "no following a link"
        );
    }
}
