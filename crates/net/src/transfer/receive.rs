//! The receiving side: bytes read (or spliced) from the socket into the
//! partial file, hashed, counted against the announced size.

use super::blocking::{bytes_waiting, is_timeout, peer_name, stop_requested, Idle, SliceTimeout};
use super::partial::{create_partial, Partial};
use super::{
    check_packet, hash_file, hex, io_error, storage_error, RxReport, TransferError, POLL_SLICE,
};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

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
    reserve(&partial, expected_bytes)?;
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
        drain_pipe(&pipe, &partial, n as usize)?;
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

/// Reserve the file's blocks up front: fewer allocations while data flows,
/// and a full disk shows at once. Not every file system can: only a full
/// one is an error.
fn reserve(partial: &Partial, bytes: u64) -> Result<(), TransferError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: fallocate on our own file descriptor.
    let rc = unsafe { libc::fallocate(partial.file.as_raw_fd(), 0, 0, bytes as libc::off_t) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
            return Err(storage_error(e, &partial.dir, "reserving space"));
        }
    }
    Ok(())
}

/// Move the `in_pipe` bytes waiting in `pipe` into the partial file.
fn drain_pipe(pipe: &Pipe, partial: &Partial, mut in_pipe: usize) -> Result<(), TransferError> {
    while in_pipe > 0 {
        // SAFETY: splice between two descriptors we own; no user memory.
        // The file offset advances with each call.
        let m = unsafe {
            libc::splice(
                pipe.read,
                std::ptr::null_mut(),
                partial.file.as_raw_fd(),
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
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::{commit, hex};
    use std::io::Write;
    use std::net::TcpListener;
    use xxhash_rust::xxh3::Xxh3;

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
}
