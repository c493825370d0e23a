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
//!
//! # Files
//!
//! This one holds the reports, the errors and the hash; `send.rs` the
//! sending side, `receive.rs` the receiving side (read or splice),
//! `partial.rs` the partial file and its commit (through
//! `osprobe_core::sys::commit`), `blocking.rs` the socket timeouts, idle
//! limit and progress, `fs.rs` free space and source files, and `names.rs`
//! the confinement of a peer's file name.

mod blocking;
mod fs;
mod names;
mod partial;
mod receive;
mod send;
#[cfg(test)]
mod tests;

pub use fs::{check_space, create_source_file};
pub use names::confine;
pub use partial::{commit, discard, sweep_partials};
pub use receive::{receive_file, receive_file_spliced};
pub use send::send_file;

use partial::Partial;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;
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

/// Buffer of the hash passes and of [`create_source_file`].
const BULK_CHUNK: usize = 1024 * 1024;

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

/// A transfer's error as an experiment's: a system call keeps its cause;
/// the others are checks of the transfer, whose words say it all.
impl From<TransferError> for osprobe_core::ExperimentError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Io { context, source } => {
                osprobe_core::ExperimentError::Io { context, source }
            }
            TransferError::Interrupted => osprobe_core::ExperimentError::Interrupted,
            other => osprobe_core::ExperimentError::Failed(other.to_string()),
        }
    }
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

fn check_packet(packet: usize) -> Result<(), TransferError> {
    if packet == 0 || packet > MAX_PACKET {
        return Err(TransferError::BadPacketSize { packet });
    }
    Ok(())
}
