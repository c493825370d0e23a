//! Hashing whole files, bounded in size and in time, and (over UDP) off the
//! request workers.
//!
//! A Hash reads the whole file: 4 GiB of a sparse file took 6.9 s, and on a
//! UDP worker it held that worker (with min(4, CPUs) workers, every other
//! client's getattr waited behind it). So over UDP a Hash is queued to a
//! small pool of hasher threads ([`HASHERS`]), which answer the client
//! themselves; the queue is bounded ([`QUEUE`]) and a Hash that finds it
//! full is answered BUSY. Over TCP a Hash runs on its own connection's
//! thread, which serves no one else.
//!
//! Every Hash is bounded: a file larger than the server's `max_hash_bytes`
//! is refused before any byte is read, and hashing stops at `hash_timeout`.

use crate::protocol::{ErrorCode, Handle, Header, RemoteError};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Hasher threads of a UDP server.
pub const HASHERS: usize = 2;
/// Hashes waiting for a hasher at most.
pub const QUEUE: usize = 16;
/// Chunk in which files are read.
const CHUNK: usize = 256 * 1024;

/// The limits of one hash.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// xxh3-128 of the whole of `f` within `limits`: (size, hash).
pub fn hash_file(f: &File, limits: Limits) -> Result<(u64, u128), RemoteError> {
    let size = f
        .metadata()
        .map_err(|e| crate::protocol::io_error(&e, "hash"))?
        .len();
    if size > limits.max_bytes {
        return Err(RemoteError::new(
            ErrorCode::TooBig,
            format!(
                "a file of {size} bytes is larger than this server hashes ({} bytes at most)",
                limits.max_bytes
            ),
        ));
    }
    let started = Instant::now();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        if started.elapsed() > limits.timeout {
            return Err(RemoteError::new(
                ErrorCode::TooBig,
                format!(
                    "hashing stopped at the server's time limit of {:.1} s, after {offset} bytes",
                    limits.timeout.as_secs_f64()
                ),
            ));
        }
        // The file may grow while it is hashed: never past the limit.
        if offset > limits.max_bytes {
            return Err(RemoteError::new(
                ErrorCode::TooBig,
                format!(
                    "the file grew past the server's hash limit of {} bytes while it was hashed",
                    limits.max_bytes
                ),
            ));
        }
        match f.read_at(&mut buf, offset) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(crate::protocol::io_error(&e, "hash")),
        }
    }
    Ok((offset, hasher.digest128()))
}

/// A Hash request waiting for a hasher thread: what it needs to run and to
/// be answered.
pub(crate) struct Job {
    pub header: Header,
    pub file: Handle,
    pub to: SocketAddr,
}

/// The bounded queue between the UDP workers and the hasher threads.
pub(crate) struct Queue {
    tx: SyncSender<Job>,
    rx: Mutex<Receiver<Job>>,
}

impl Queue {
    pub fn new() -> Queue {
        let (tx, rx) = sync_channel(QUEUE);
        Queue {
            tx,
            rx: Mutex::new(rx),
        }
    }

    /// Queue `job`; gives it back if the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(j) | TrySendError::Disconnected(j) => j,
        })
    }

    /// The next job, or None after `wait` without one.
    pub fn next(&self, wait: Duration) -> Option<Job> {
        let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        // A timeout, or no sender left: nothing to do now.
        rx.recv_timeout(wait).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_bounded_in_size_and_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello world").unwrap();
        let f = File::open(&path).unwrap();
        let roomy = Limits {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(60),
        };
        assert_eq!(
            hash_file(&f, roomy).unwrap(),
            (11, xxhash_rust::xxh3::xxh3_128(b"hello world"))
        );
        let small = Limits {
            max_bytes: 10,
            ..roomy
        };
        let e = hash_file(&f, small).unwrap_err();
        assert_eq!(e.code, ErrorCode::TooBig);
        assert!(e.detail.contains("10 bytes at most"), "{e}");
        // A large sparse file against a tiny time limit.
        let big = File::create(dir.path().join("big")).unwrap();
        big.set_len(1 << 30).unwrap();
        let big = File::open(dir.path().join("big")).unwrap();
        let hurried = Limits {
            max_bytes: u64::MAX,
            timeout: Duration::from_millis(1),
        };
        let e = hash_file(&big, hurried).unwrap_err();
        assert!(e.detail.contains("time limit"), "{e}");
    }
}
