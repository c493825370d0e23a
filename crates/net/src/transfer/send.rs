//! The sending side: the file read in packets and written whole, or handed
//! to the kernel with sendfile(2) and hashed after.

use super::blocking::{is_timeout, peer_name, stop_requested, Idle, Progress, SliceTimeout};
use super::{
    check_packet, hex, io_error, SendMethod, TransferError, TxReport, BULK_CHUNK,
    DEFAULT_SEND_IDLE_LIMIT, POLL_SLICE,
};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// Bytes per sendfile(2) call: large enough that the system-call cost
/// vanishes, small enough to report progress and look at the stop flag.
const SENDFILE_CHUNK: usize = 4 * 1024 * 1024;

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
